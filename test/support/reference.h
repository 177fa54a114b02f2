// Plain double-precision reference implementations that the kernel tests compare with.
// Written as the textbook loops, independent of the kernels under test.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"

namespace gridnn::test {

// One row-major matrix product: alpha * op(A) op(B) + beta * C0 ([m, n]); C0 is read only
// when beta != 0. a, b, c0 hold exactly one matrix each.
std::vector<double> reference_gemm(const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& c0, int64_t m, int64_t n, int64_t k,
                                   const ops::GemmOptions& options);

// x reduced over dimension `dim` (row-major), in the output order of ops::reduce.
std::vector<double> reference_reduce(ops::ReduceOp op, const Tensor& x, int dim);

}  // namespace gridnn::test
