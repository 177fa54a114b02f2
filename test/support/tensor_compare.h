// Comparing tensors in tests.
//
//   EXPECT_TRUE(tensors_close(actual, expected, {atol, rtol}));
//
// passes when |actual - expected| <= atol + rtol * |expected| for every element, and
// otherwise reports how many elements failed and the worst one: its flat index, its
// multi-index, both values and the error. NaN matches only NaN; inf only the same inf.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "core/tensor.h"

namespace gridnn::test {

struct Tolerance {
  double atol = 1e-6;
  double rtol = 1e-5;
};

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, Tolerance tol = {});
// Bitwise equality of shape, dtype and bytes (for determinism tests).
::testing::AssertionResult tensors_equal(const Tensor& actual, const Tensor& expected);
// max |a - ref| / max |ref| (0 when both are all zero): the per-tensor relative error of
// docs/design.md §4.
double max_relative_error(const Tensor& actual, const Tensor& expected);
// Any-dtype tensor (any device) as doubles on the host.
std::vector<double> to_doubles(const Tensor& t);
// The other way: a CPU f32 tensor of `shape` holding `values` (rounded to float).
Tensor from_doubles(const std::vector<double>& values, const Shape& shape);

}  // namespace gridnn::test

namespace gridnn {
// Lets GoogleTest print a DType parameter by name ("bf16") rather than as bytes.
inline void PrintTo(DType d, std::ostream* os) { *os << dtype_name(d); }
}  // namespace gridnn
