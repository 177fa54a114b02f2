// NiftiDataset: the volumes listed in a CSV manifest (models/data/manifest.h), read with
// read_nifti_volume (models/data/nifti_volume.h) and brought to the model's input size.
//
// load(index) computes, in this order:
//   1. the volume [D, H, W] of the row's file, reoriented (orientation.h): options.orientation
//      canonical (the default) reorders it to nibabel's closest canonical RAS+ (tensor axes
//      S, A, R; sform, else qform, else the stored order with a warning), native keeps the
//      stored voxel order; then, with options.spacing > 0, trilinearly resampled to voxels of
//      that many mm along every axis (voxel-centre aligned, resample_to_spacing);
//   2. fit to options.target {D, H, W}, per axis:
//        crop:     center crop or zero pad (an odd difference puts the extra voxel at the
//                  end: 5 -> 2 keeps 1..2, 2 -> 5 pads 1 before and 2 after);
//        resample: trilinear, corner-aligned (output voxel o samples source coordinate
//                  o * (n - 1) / (t - 1); t = 1 samples the middle), so a volume linear in
//                  its indices resamples exactly;
//   3. z-score over the fitted volume (padding included): (x - mean) / std, std = the
//      population standard deviation; a constant volume (std 0) only has its mean
//      subtracted. options.normalize = false skips this;
//   4. with augment.enabled, a flip of each of the axes D, H and W with probability 1/2:
//      axis a (0 = D, 1 = H, 2 = W) flips when philox_unit(word a) < 0.5, the words being
//      philox_words(augment.seed, philox_stream_id("data.flip") + augment.epoch, index);
//      the flips are thus a pure function of (seed, epoch, index);
//   5. planes [slab.d_begin, slab.d_end) of the result, copied into x [1, slab depth, H, W].
// A slab is always cut from the whole fitted volume, so it equals the same planes of a full
// load; the whole file is read for every slab (a .gz file cannot be read partially).
//
// load_scan(index) is steps 1 to 3 for inference, with the map back: every step is an
// index map (orientation.h), composed into Scan::to_stored (network index -> stored index),
// so map_to_stored(heatmap, scan.to_stored, scan.stored.dims) puts a network-space map on
// the file's grid and write_nifti_like (nifti_volume.h) writes it with the file's geometry.
//
// Samples have one channel (C = 1). num_classes is options.num_classes when given (every
// label must be below it), else the largest label + 1. The dataset holds no mutable
// state: load() may run on several threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "core/names.h"
#include "models/data/dataset.h"
#include "models/data/manifest.h"
#include "models/data/orientation.h"

namespace gridnn::data {

enum class Fit { crop, resample };
inline constexpr EnumName<Fit> kFitNames[] = {{Fit::crop, "crop", "center crop / zero pad"},
                                              {Fit::resample, "resample", "trilinear"}};
constexpr EnumNames<Fit> enum_names(Fit) { return {"fit mode", kFitNames}; }

struct NiftiDatasetOptions {
  std::array<int64_t, 3> target{0, 0, 0};  // {D, H, W} of every sample: the model input
  Fit fit = Fit::crop;
  bool normalize = true;                             // per-volume z-score (step 3)
  int64_t num_classes = 0;                           // 0: the largest label + 1
  std::optional<Split> split;                        // keep only the manifest rows of this split
  Orientation orientation = Orientation::canonical;  // step 1
  double spacing = 0;                                // step 1: resample to voxels of this many mm; 0: off
};

// One scan for inference: the network's input and how it maps back.
struct Scan {
  Tensor volume;         // [D, H, W] = options.target, fitted and (options.normalize) z-scored, no augmentation
  ScanGeometry stored;   // the file's geometry and stored dims
  IndexMap to_stored{};  // network index (d, h, w) -> stored index
};

class NiftiDataset : public Dataset {
 public:
  NiftiDataset(Manifest manifest, NiftiDatasetOptions options);
  // The dataset listed in the CSV file `csv_path`.
  static NiftiDataset from_csv(const std::string& csv_path, NiftiDatasetOptions options);

  int64_t size() const override { return int64_t(rows_.size()); }
  Shape sample_shape() const override;
  int64_t num_classes() const override { return num_classes_; }
  int64_t label(int64_t index) const override;
  int64_t load(int64_t index, Tensor& x, const Augment& augment, const DepthSlab& slab = {}) const override;
  std::string describe(int64_t index) const override;

  const ManifestRow& row(int64_t index) const;
  // Steps 1 to 4 of load(): the whole sample [D, H, W] for (index, augment).
  Tensor load_volume(int64_t index, const Augment& augment) const;
  // Steps 1 to 3 with the file's geometry and the network -> stored index map.
  Scan load_scan(int64_t index) const;
  const NiftiDatasetOptions& options() const { return options_; }

 private:
  // Steps 1 to 3; the geometry and the composed map when asked for.
  Tensor prepare(int64_t index, ScanGeometry* geometry, IndexMap* to_stored) const;

  std::string source_;  // the manifest, for messages
  std::vector<ManifestRow> rows_;
  NiftiDatasetOptions options_;
  int64_t num_classes_ = 0;
};

}  // namespace gridnn::data
