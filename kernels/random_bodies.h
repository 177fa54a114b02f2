// The value of element i of a random draw, for host and device (DESIGN §3).
#pragma once

#include "core/philox.h"
#include "kernels/random.h"

namespace gridnn::kernels::body {

GRIDNN_HD GRIDNN_INLINE float random_value(Distribution d, float a, float b, uint64_t seed,
                                           uint64_t stream, uint64_t index) {
  if (d == Distribution::uniform) return a + (b - a) * philox_uniform(seed, stream, index);
  return a + b * philox_normal(seed, stream, index);
}

}  // namespace gridnn::kernels::body
