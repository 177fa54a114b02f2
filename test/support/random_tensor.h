// Random test inputs drawn straight from Philox (not through the kernels under test).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gridnn::test {

// CPU tensor of `dtype` with values uniform in [lo, hi), keyed by `seed`.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f, DType dtype = DType::f32);

}  // namespace gridnn::test
