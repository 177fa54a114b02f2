// The value of element i of a random draw, for host and device (docs/design.md §3).
#pragma once

#include "core/philox.h"
#include "kernels/random.h"

namespace gridnn::kernels::body {

GRIDNN_HD GRIDNN_INLINE int64_t global_index(const IndexMap& m, int64_t local) {
  int64_t g = m.base;
  for (int d = m.rank - 1; d >= 0; --d) {
    g += (local % m.dims[d]) * m.strides[d];
    local /= m.dims[d];
  }
  return g;
}

GRIDNN_HD GRIDNN_INLINE float random_value(Distribution d, float a, float b, uint64_t seed, uint64_t stream,
                                           uint64_t index) {
  if (d == Distribution::uniform) return a + (b - a) * philox_uniform(seed, stream, index);
  return a + b * philox_normal(seed, stream, index);
}

// Element `local` of a draw described by `s`.
GRIDNN_HD GRIDNN_INLINE float random_at(const RandomSpec& s, int64_t local) {
  return random_value(s.distribution, s.a, s.b, s.seed, s.stream, uint64_t(global_index(s.map, local)));
}

}  // namespace gridnn::kernels::body
