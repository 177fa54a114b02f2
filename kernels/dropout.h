// Dropout with a Philox mask that is recomputed, not stored: the forward and the
// backward draw the same mask from (seed, stream, step, global element index), so a run
// is reproducible and the mask does not depend on the grid (kernels/dropout_bodies.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/dropout_bodies.h"

namespace gridnn::ops {

struct DropoutKey {
  uint64_t seed = 0;
  uint64_t stream = 0;  // philox_stream_id of the layer's name
  uint64_t step = 0;    // training step: a new mask each step, the same within one
  int64_t offset = 0;   // global flat index of element 0 (a batch shard: first sample * sample size)
};

// y = x * mask / (1 - p); y may be x. p in [0, 1].
void dropout_forward(const Tensor& x, float p, const DropoutKey& key, Tensor& y);
// dx = dy * mask / (1 - p), the mask of the forward with the same key; dx may be dy.
void dropout_backward(const Tensor& dy, float p, const DropoutKey& key, Tensor& dx);

}  // namespace gridnn::ops

namespace gridnn::kernels::cpu {
void dropout(const DropoutSpec& spec, const Tensor& in, Tensor& out);
}
namespace gridnn::kernels::cuda {
void dropout(const DropoutSpec& spec, const Tensor& in, Tensor& out);
}
