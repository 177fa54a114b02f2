// GEMM's contracts: no aliasing of the output, shape and dtype errors. Its values (every
// transpose, batched and shared operands, alpha/beta, an empty inner dimension, 16-bit
// operands, math modes) and its gradient are op harness cases (test/ops/cases_gemm.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"

namespace gridnn {
namespace {
using test::random_tensor;

TEST(Gemm, OutputMustNotAliasAnOperand) {
  Tensor a = random_tensor({3, 3}, 13), b = random_tensor({3, 3}, 14);
  EXPECT_THROW(ops::gemm(a, b, a), Error);
  EXPECT_THROW(ops::gemm(a, b, b), Error);
}

TEST(Gemm, ShapeErrorsSayWhatIsWrong) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 2}), c = Tensor::zeros({3, 2});
  const std::string what = test::error_message([&] { ops::gemm(a, b, c); });
  EXPECT_NE(what.find("inner dimensions differ"), std::string::npos) << what;
  Tensor b2 = Tensor::zeros({4, 2}), cbad = Tensor::zeros({2, 3});
  EXPECT_THROW(ops::gemm(a, b2, cbad), Error);
  EXPECT_THROW(ops::gemm(Tensor::zeros({2, 3, 4}), b2, c), Error);  // 3-D needs gemm_batched
  EXPECT_THROW(ops::gemm(a, ops::cast(b2, DType::bf16), c), Error);
  Tensor c3 = Tensor::zeros({2, 3, 2});
  EXPECT_THROW(ops::gemm_batched(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 2}), c3), Error);  // batch 3 vs 2
}

}  // namespace
}  // namespace gridnn
