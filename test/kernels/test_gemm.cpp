// GEMM against a triple loop in double: every transpose, batched and shared operands,
// alpha/beta, empty inner dimension, 16-bit operands, and a gradient check.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "test/support/grad_check.h"
#include "test/support/random_tensor.h"
#include "test/support/reference.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::random_tensor;
using test::to_doubles;
using test::reference_gemm;

Tensor reference_tensor(const std::vector<double>& v, const Shape& s) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), s);
}

class GemmTranspose : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(GemmTranspose, MatchesTripleLoop) {
  auto [ta, tb] = GetParam();
  const int64_t m = 7, n = 5, k = 9;
  Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
  Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
  Tensor c = random_tensor({m, n}, 3);
  ops::GemmOptions o;
  o.transpose_a = ta;
  o.transpose_b = tb;
  o.alpha = 1.5f;
  o.beta = -0.5f;
  auto ref = reference_gemm(to_doubles(a), to_doubles(b), to_doubles(c), m, n, k, o);
  ops::gemm(a, b, c, o);
  EXPECT_TRUE(test::tensors_close(c, reference_tensor(ref, {m, n}), {1e-5, 1e-5}));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTranspose,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(Gemm, BetaZeroOverwritesEvenNaN) {
  Tensor a = random_tensor({3, 4}, 4), b = random_tensor({4, 2}, 5);
  Tensor c = Tensor::empty({3, 2});
  ops::fill(c, std::nan(""));
  ops::gemm(a, b, c);
  for (double v : to_doubles(c)) EXPECT_TRUE(std::isfinite(v));
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  Tensor a = Tensor::zeros({3, 0}), b = Tensor::zeros({0, 2});
  Tensor c = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  ops::GemmOptions o;
  o.beta = 2.0f;
  ops::gemm(a, b, c, o);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  o.beta = 0.0f;
  ops::gemm(a, b, c, o);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>(6, 0.0f)));
}

TEST(Gemm, BatchedWithSharedOperand) {
  const int64_t batch = 3, m = 4, n = 6, k = 5;
  Tensor a = random_tensor({batch, m, k}, 6);
  Tensor b = random_tensor({n, k}, 7);  // shared by every batch entry, transposed
  Tensor c = Tensor::empty({batch, m, n});
  ops::GemmOptions o;
  o.transpose_b = true;
  ops::gemm_batched(a, b, c, o);
  std::vector<double> va = to_doubles(a), vb = to_doubles(b), vc = to_doubles(c);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<double> ai(va.begin() + i * m * k, va.begin() + (i + 1) * m * k);
    auto ref = reference_gemm(ai, vb, {}, m, n, k, o);
    for (int64_t j = 0; j < m * n; ++j) EXPECT_NEAR(vc[size_t(i * m * n + j)], ref[size_t(j)], 1e-5);
  }
}

TEST(Gemm, HalfOperandsAccumulateInFloat) {
  for (DType dt : {DType::f16, DType::bf16}) {
    const int64_t m = 8, n = 8, k = 512;
    Tensor a = random_tensor({m, k}, 8, -1, 1, dt), b = random_tensor({k, n}, 9, -1, 1, dt);
    Tensor c = Tensor::empty({m, n}, dt);
    ops::gemm(a, b, c);
    auto ref = reference_gemm(to_doubles(a), to_doubles(b), {}, m, n, k, {});
    // Only the final rounding to 16 bits: |c| ~ sqrt(k / 9) ~ 7.5.
    double tol = dt == DType::f16 ? 8e-3 : 6e-2;
    std::vector<double> got = to_doubles(c);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], tol) << dtype_name(dt);
  }
}

TEST(Gemm, GradientOfAProductMatchesCentralDifferences) {
  // L = sum(W * (A B)); dL/dA = W B^T, dL/dB = A^T W.
  Tensor a = random_tensor({4, 6}, 10), b = random_tensor({6, 3}, 11), w = random_tensor({4, 3}, 12);
  Tensor c = Tensor::empty({4, 3});
  auto loss = [&] {
    ops::gemm(a, b, c);
    return test::weighted_sum(c, w);
  };
  Tensor da = Tensor::empty({4, 6}), db = Tensor::empty({6, 3});
  ops::gemm(w, b, da, {false, true});
  ops::gemm(a, w, db, {true, false});
  EXPECT_TRUE(test::check_gradient(loss, a, da));
  EXPECT_TRUE(test::check_gradient(loss, b, db));
}

TEST(Gemm, OutputMustNotAliasAnOperand) {
  Tensor a = random_tensor({3, 3}, 13), b = random_tensor({3, 3}, 14);
  EXPECT_THROW(ops::gemm(a, b, a), Error);
  EXPECT_THROW(ops::gemm(a, b, b), Error);
}

TEST(Gemm, ShapeErrorsSayWhatIsWrong) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 2}), c = Tensor::zeros({3, 2});
  try {
    ops::gemm(a, b, c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inner dimensions differ"), std::string::npos) << e.what();
  }
  Tensor b2 = Tensor::zeros({4, 2}), cbad = Tensor::zeros({2, 3});
  EXPECT_THROW(ops::gemm(a, b2, cbad), Error);
  EXPECT_THROW(ops::gemm(Tensor::zeros({2, 3, 4}), b2, c), Error);  // 3-D needs gemm_batched
  EXPECT_THROW(ops::gemm(a, ops::cast(b2, DType::bf16), c), Error);
  Tensor c3 = Tensor::zeros({2, 3, 2});
  EXPECT_THROW(ops::gemm_batched(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 2}), c3), Error);  // batch 3 vs 2
}

}  // namespace
}  // namespace gridnn
