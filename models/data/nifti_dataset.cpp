#include "models/data/nifti_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/philox.h"
#include "models/data/nifti_volume.h"
#include "models/data/volume_transforms.h"

namespace gridnn::data {

namespace {
// "scans.csv:12" for a manifest row; the source alone for a row not read from a file (line 0).
std::string listed_at(const std::string& source, const ManifestRow& r) {
  return r.line > 0 ? source + ":" + std::to_string(r.line) : source;
}
}  // namespace

NiftiDataset::NiftiDataset(Manifest manifest, NiftiDatasetOptions options)
    : source_(std::move(manifest.source)), options_(options) {
  const auto& t = options_.target;
  GRIDNN_REQUIRE(t[0] > 0 && t[1] > 0 && t[2] > 0, source_, ": the target size ", t[0], "x", t[1], "x", t[2],
                 " must be positive in every axis (the model's input D, H, W)");
  GRIDNN_REQUIRE(std::isfinite(options_.spacing) && options_.spacing >= 0, source_, ": the spacing ", options_.spacing,
                 " must be 0 (off) or a positive number of mm");
  for (ManifestRow& row : manifest.rows)
    if (!options_.split || row.split == *options_.split) rows_.push_back(std::move(row));
  GRIDNN_REQUIRE(!rows_.empty(), source_, ": no rows in split \"", options_.split ? enum_name(*options_.split) : "",
                 "\"", options_.split == Split::unassigned ? " (unassigned rows)" : "",
                 "; assign rows to it in the manifest's third column or choose another split");
  int64_t max_label = 0;
  for (const ManifestRow& row : rows_) max_label = std::max(max_label, row.label);
  num_classes_ = options_.num_classes > 0 ? options_.num_classes : max_label + 1;
  for (const ManifestRow& row : rows_)
    GRIDNN_REQUIRE(row.label < num_classes_, listed_at(source_, row), ": label ", row.label,
                   " is not below the number of classes ", num_classes_,
                   "; fix the label or raise the number of classes");
}

NiftiDataset NiftiDataset::from_csv(const std::string& csv_path, NiftiDatasetOptions options) {
  return NiftiDataset(read_manifest(csv_path), options);
}

Shape NiftiDataset::sample_shape() const { return {1, options_.target[0], options_.target[1], options_.target[2]}; }

const ManifestRow& NiftiDataset::row(int64_t index) const {
  GRIDNN_REQUIRE(index >= 0 && index < size(), source_, ": sample ", index, " is out of range (the dataset has ",
                 size(), " samples)");
  return rows_[size_t(index)];
}

int64_t NiftiDataset::label(int64_t index) const { return row(index).label; }

std::string NiftiDataset::describe(int64_t index) const {
  const ManifestRow& r = row(index);
  return r.path + " (sample " + std::to_string(index) + ", " + listed_at(source_, r) + ")";
}

Tensor NiftiDataset::prepare(int64_t index, ScanGeometry* geometry, IndexMap* to_stored) const {
  const ManifestRow& r = row(index);
  ScanGeometry g;
  GridVolume grid;
  try {
    Tensor stored = read_nifti_volume(r.path, &g);
    grid = orient(stored, g, options_.orientation);
    if (options_.spacing > 0) grid = resample_to_spacing(grid, options_.spacing);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " [sample " + std::to_string(index) + ", listed at " + listed_at(source_, r) +
                "]");
  }
  const std::array<int64_t, 3> from{grid.volume.size(0), grid.volume.size(1), grid.volume.size(2)};
  Tensor volume;
  IndexMap fit_map;
  if (options_.fit == Fit::crop) {
    volume = center_crop_or_pad(grid.volume, options_.target);
    fit_map = crop_or_pad_index_map(from, options_.target);
  } else {
    volume = resample_trilinear(grid.volume, options_.target);
    fit_map = resample_index_map(from, options_.target);
  }
  if (options_.normalize) zscore_(volume);
  if (to_stored) *to_stored = compose(grid.to_stored, fit_map);
  if (geometry) *geometry = std::move(g);
  return volume;
}

Tensor NiftiDataset::load_volume(int64_t index, const Augment& augment) const {
  Tensor volume = prepare(index, nullptr, nullptr);
  if (augment.enabled) {
    const Philox4x32 words = philox_words(augment.seed, philox_stream_id("data.flip") + augment.epoch, uint64_t(index));
    flip_(volume, {philox_unit(words.v[0]) < 0.5f, philox_unit(words.v[1]) < 0.5f, philox_unit(words.v[2]) < 0.5f});
  }
  return volume;
}

Scan NiftiDataset::load_scan(int64_t index) const {
  Scan scan;
  scan.volume = prepare(index, &scan.stored, &scan.to_stored);
  return scan;
}

int64_t NiftiDataset::load(int64_t index, Tensor& x, const Augment& augment, const DepthSlab& slab) const {
  const SlabRange planes = check_sample_output(describe(index), sample_shape(), slab, x);
  const Tensor volume = load_volume(index, augment);
  const int64_t plane = options_.target[1] * options_.target[2];
  std::memcpy(x.data<float>(), volume.data<float>() + planes.begin * plane,
              size_t((planes.end - planes.begin) * plane) * sizeof(float));
  return row(index).label;
}

}  // namespace gridnn::data
