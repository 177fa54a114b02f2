// The dropout mask of one element, for host and device (docs/design.md §3).
//
// Element i keeps its value when its Philox uniform u >= p, u keyed by (seed, stream,
// counter) with counter = (step << 40) + global index of the element. The global index
// makes the mask independent of how the batch is split over ranks; the step gives every
// training step a fresh mask (tensors up to 2^40 elements, 2^24 steps before the counter
// wraps). Kept values are scaled by 1 / (1 - p); p = 1 drops everything.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/philox.h"

namespace gridnn::kernels {

struct DropoutSpec {
  float p;      // drop probability, in [0, 1]
  float scale;  // 1 / (1 - p); 0 when p = 1
  uint64_t seed, stream;
  uint64_t base;  // (step << 40) + global index of local element 0
};

namespace body {

GRIDNN_HD GRIDNN_INLINE float dropout_factor(const DropoutSpec& s, int64_t i) {
  const float u = philox_uniform(s.seed, s.stream, s.base + uint64_t(i));
  return u >= s.p ? s.scale : 0.0f;
}

// out[i] = in[i] * factor(i): the forward (in = x) and the backward (in = dy) alike.
template <class T>
GRIDNN_HD GRIDNN_INLINE void dropout_at(const DropoutSpec& s, const T* in, T* out, int64_t i) {
  out[i] = from_float<T>(to_float(in[i]) * dropout_factor(s, i));
}

}  // namespace body
}  // namespace gridnn::kernels
