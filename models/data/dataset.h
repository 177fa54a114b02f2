// Datasets: numbered samples of shape [C, D, H, W] with integer labels, read on demand.
//
// A sample is a pure function of (dataset, index, augmentation key): no hidden state, so
// the background loader may call load() from its thread, a resumed run reads exactly the
// samples the uninterrupted one read, and a rank of the grid (docs/design.md §4) can read just the
// depth slab [d_begin, d_end) of the samples of its batch shard.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace gridnn::data {

// Random augmentation of one sample: the trainer derives it from (seed, epoch, index), so
// it never depends on the order samples are read in. enabled = false: the plain sample
// (validation, --dump-step).
struct Augment {
  bool enabled = false;
  uint64_t seed = 0;
  uint64_t epoch = 0;
};

// Planes [d_begin, d_end) of the depth axis; d_end = -1 means all of them.
struct DepthSlab {
  int64_t d_begin = 0;
  int64_t d_end = -1;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  // [C, D, H, W] of every sample.
  virtual Shape sample_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  // The label of sample `index` without reading its volume.
  virtual int64_t label(int64_t index) const = 0;
  // Writes sample `index` (planes `slab` of it) into `x`, a contiguous CPU f32 tensor of
  // shape [C, slab depth, H, W], and returns its label. Safe to call from several threads
  // at once. Throws gridnn::Error naming the sample's source (file) when it cannot be read.
  virtual int64_t load(int64_t index, Tensor& x, const Augment& augment, const DepthSlab& slab = {}) const = 0;
  // "ch2bet.nii.gz (sample 3)", "synthetic sample 17": used in messages.
  virtual std::string describe(int64_t index) const = 0;
};

// The depth planes [begin, end) that `slab` selects in a sample of shape [C, D, H, W], after
// checking the slab and that `x` is a contiguous CPU f32 tensor [C, end - begin, H, W]
// (gridnn::Error naming `who` otherwise). For Dataset::load implementations.
struct SlabRange {
  int64_t begin, end;
};
SlabRange check_sample_output(const std::string& who, const Shape& sample_shape, const DepthSlab& slab,
                              const Tensor& x);

}  // namespace gridnn::data
