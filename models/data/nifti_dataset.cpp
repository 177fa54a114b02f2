#include "models/data/nifti_dataset.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/philox.h"
#include "models/data/nifti_volume.h"
#include "models/data/volume_transforms.h"

namespace gridnn::data {

Fit parse_fit(const std::string& name) {
  if (name == "crop") return Fit::crop;
  if (name == "resample") return Fit::resample;
  throw Error("unknown fit mode \"" + name +
              "\"; use crop (center crop / zero pad) or "
              "resample (trilinear)");
}

NiftiDataset::NiftiDataset(Manifest manifest, NiftiDatasetOptions options)
    : source_(std::move(manifest.source)), options_(std::move(options)) {
  const auto& t = options_.target;
  GRIDNN_REQUIRE(t[0] > 0 && t[1] > 0 && t[2] > 0, source_, ": the target size ", t[0], "x", t[1],
                 "x", t[2], " must be positive in every axis (the model's input D, H, W)");
  for (ManifestRow& row : manifest.rows)
    if (!options_.split || row.split == *options_.split) rows_.push_back(std::move(row));
  GRIDNN_REQUIRE(!rows_.empty(), source_, ": no rows in split \"",
                 options_.split ? split_name(*options_.split) : "", "\"",
                 options_.split == Split::unassigned ? " (unassigned rows)" : "",
                 "; assign rows to it in the manifest's third column or choose another split");
  int64_t max_label = 0;
  for (const ManifestRow& row : rows_) max_label = std::max(max_label, row.label);
  num_classes_ = options_.num_classes > 0 ? options_.num_classes : max_label + 1;
  for (const ManifestRow& row : rows_)
    GRIDNN_REQUIRE(row.label < num_classes_, source_, ":", row.line, ": label ", row.label,
                   " is not below the number of classes ", num_classes_,
                   "; fix the label or raise the number of classes");
}

NiftiDataset NiftiDataset::from_csv(const std::string& csv_path, NiftiDatasetOptions options) {
  return NiftiDataset(read_manifest(csv_path), std::move(options));
}

Shape NiftiDataset::sample_shape() const {
  return {1, options_.target[0], options_.target[1], options_.target[2]};
}

const ManifestRow& NiftiDataset::row(int64_t index) const {
  GRIDNN_REQUIRE(index >= 0 && index < size(), source_, ": sample ", index,
                 " is out of range (the dataset has ", size(), " samples)");
  return rows_[size_t(index)];
}

int64_t NiftiDataset::label(int64_t index) const { return row(index).label; }

std::string NiftiDataset::describe(int64_t index) const {
  const ManifestRow& r = row(index);
  return r.path + " (sample " + std::to_string(index) + ", " + source_ + ":" +
         std::to_string(r.line) + ")";
}

Tensor NiftiDataset::load_volume(int64_t index, const Augment& augment) const {
  const ManifestRow& r = row(index);
  Tensor volume;
  try {
    volume = read_nifti_volume(r.path);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " [sample " + std::to_string(index) + ", listed at " +
                source_ + ":" + std::to_string(r.line) + "]");
  }
  volume = options_.fit == Fit::crop ? center_crop_or_pad(volume, options_.target)
                                     : resample_trilinear(volume, options_.target);
  if (options_.normalize) zscore_(volume);
  if (augment.enabled) {
    const Philox4x32 words =
        philox_words(augment.seed, philox_stream_id("data.flip") + augment.epoch, uint64_t(index));
    flip_(volume, {philox_unit(words.v[0]) < 0.5f, philox_unit(words.v[1]) < 0.5f,
                   philox_unit(words.v[2]) < 0.5f});
  }
  return volume;
}

int64_t NiftiDataset::load(int64_t index, Tensor& x, const Augment& augment,
                           const DepthSlab& slab) const {
  const SlabRange planes = check_sample_output(describe(index), sample_shape(), slab, x);
  const Tensor volume = load_volume(index, augment);
  const int64_t plane = options_.target[1] * options_.target[2];
  std::memcpy(x.data<float>(), volume.data<float>() + planes.begin * plane,
              size_t((planes.end - planes.begin) * plane) * sizeof(float));
  return row(index).label;
}

}  // namespace gridnn::data
