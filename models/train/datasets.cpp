// The datasets of a training run: synthetic train/validation sets, or a NIfTI manifest's
// rows split into train and validation.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/data/loader.h"
#include "models/data/nifti_dataset.h"
#include "models/data/synthetic.h"
#include "models/train/trainer.h"

namespace gridnn::train {

namespace {
// Sample ids of the synthetic validation set start here, far from the training ids.
constexpr int64_t kSyntheticValidationFirstId = int64_t(1) << 32;
}  // namespace

Datasets make_datasets(const TrainOptions& o) {
  Datasets d;
  if (o.data.synthetic()) {
    data::SyntheticOptions s;
    s.classes = o.classes;
    s.channels = o.in_channels;
    s.size = Shape{o.input[0], o.input[1], o.input[2]};
    s.seed = o.seed;
    s.samples = o.data.train_samples;
    d.train = std::make_unique<data::SyntheticDataset>(s);
    s.samples = o.data.val_samples;
    s.first_index = kSyntheticValidationFirstId;
    d.val = std::make_unique<data::SyntheticDataset>(s);
    return d;
  }
  // A manifest: its own train / val split when it has one (test rows are left out), else a
  // seeded share of val_fraction of the rows for validation.
  const data::Manifest all = data::read_manifest(o.data.source);
  data::Manifest train{all.source, {}}, val{all.source, {}};
  const bool has_split = std::any_of(all.rows.begin(), all.rows.end(),
                                     [](const data::ManifestRow& r) { return r.split != data::Split::unassigned; });
  if (has_split) {
    for (const auto& r : all.rows) {
      if (r.split == data::Split::val)
        val.rows.push_back(r);
      else if (r.split != data::Split::test)
        train.rows.push_back(r);
    }
  } else {
    const auto order = data::epoch_order(int64_t(all.rows.size()), o.seed, -2);
    const auto n_val = int64_t(std::llround(o.data.val_fraction * double(all.rows.size())));
    for (size_t i = 0; i < order.size(); ++i)
      (int64_t(i) < n_val ? val : train).rows.push_back(all.rows[size_t(order[i])]);
  }
  GRIDNN_REQUIRE(!train.rows.empty() && !val.rows.empty(), o.data.source, ": need training and validation rows, got ",
                 train.rows.size(), " and ", val.rows.size(),
                 "; give rows the split 'val', or set --val-fraction between 0 and 1");
  const data::NiftiDatasetOptions no = run::nifti_dataset_options(o);
  d.train = std::make_unique<data::NiftiDataset>(std::move(train), no);
  d.val = std::make_unique<data::NiftiDataset>(std::move(val), no);
  return d;
}

}  // namespace gridnn::train
