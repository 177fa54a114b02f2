// Element-wise ops against plain double loops, for every floating dtype.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "test/support/grad_check.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::random_tensor;
using test::tensors_close;
using test::to_doubles;

// Tolerance for results stored in `dtype` (one rounding of the stored value).
test::Tolerance stored(DType dtype) {
  if (dtype == DType::f16) return {1e-3, 1e-3};
  if (dtype == DType::bf16) return {1e-2, 8e-3};
  return {1e-6, 1e-6};
}

Tensor from_doubles(const std::vector<double>& v, const Shape& shape, DType dtype) {
  std::vector<float> f(v.begin(), v.end());
  return ops::cast(Tensor::from_vector(f, shape), dtype);
}

class ElementwiseByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseByDtype, AddMulAxpyScaleReluMatchLoops) {
  const DType dt = GetParam();
  const Shape shape{3, 5, 7};  // odd sizes
  Tensor a = random_tensor(shape, 1, -2, 2, dt), b = random_tensor(shape, 2, -2, 2, dt);
  std::vector<double> va = to_doubles(a), vb = to_doubles(b);
  std::vector<double> sum(va.size()), prod(va.size()), ax(va.size()), sc(va.size()), re(va.size()),
      rb(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    sum[i] = va[i] + vb[i];
    prod[i] = va[i] * vb[i];
    ax[i] = vb[i] + 0.75 * va[i];
    sc[i] = va[i] * -1.5;
    re[i] = va[i] > 0 ? va[i] : 0;
    rb[i] = va[i] > 0 ? vb[i] : 0;
  }
  Tensor out = Tensor::empty(shape, dt);
  ops::add(a, b, out);
  EXPECT_TRUE(tensors_close(out, from_doubles(sum, shape, dt), stored(dt)));
  ops::mul(a, b, out);
  EXPECT_TRUE(tensors_close(out, from_doubles(prod, shape, dt), stored(dt)));
  ops::relu_forward(a, out);
  EXPECT_TRUE(tensors_close(out, from_doubles(re, shape, dt), stored(dt)));
  ops::relu_backward(a, b, out);
  EXPECT_TRUE(tensors_close(out, from_doubles(rb, shape, dt), stored(dt)));
  Tensor y = b.clone();
  ops::axpy(0.75f, a, y);
  EXPECT_TRUE(tensors_close(y, from_doubles(ax, shape, dt), stored(dt)));
  Tensor x = a.clone();
  ops::scale(x, -1.5f);
  EXPECT_TRUE(tensors_close(x, from_doubles(sc, shape, dt), stored(dt)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ElementwiseByDtype,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(Elementwise, LargeTensorsTakeTheParallelPathAndAgree) {
  // Above kParallelGrain elements the CPU loops run on OpenMP threads.
  const Shape shape{3, 70001};
  Tensor a = random_tensor(shape, 21), b = random_tensor(shape, 22), out = Tensor::empty(shape);
  std::vector<double> va = to_doubles(a), vb = to_doubles(b), sum(va.size()), re(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    sum[i] = va[i] + vb[i];
    re[i] = va[i] > 0 ? va[i] : 0;
  }
  ops::add(a, b, out);
  EXPECT_TRUE(tensors_close(out, from_doubles(sum, shape, DType::f32), stored(DType::f32)));
  ops::relu_forward(a, out);
  EXPECT_TRUE(tensors_close(out, from_doubles(re, shape, DType::f32), stored(DType::f32)));
  Tensor h = ops::cast(a, DType::bf16);
  EXPECT_TRUE(tensors_close(ops::cast(h, DType::f32), a, stored(DType::bf16)));
}

TEST(Elementwise, PartlyOverlappingOutputsAreRejected) {
  Tensor t = random_tensor({4, 8}, 23);
  Tensor rows01 = t.narrow(0, 2), rows12 = t.narrow(1, 2);
  EXPECT_THROW(ops::add(rows01, rows01, rows12), Error);  // shifted by one row
  EXPECT_THROW(ops::relu_forward(rows01, rows12), Error);
  EXPECT_THROW(rows12.copy_from(rows01), Error);
  Tensor other = t.narrow(2, 2);
  EXPECT_NO_THROW(ops::add(rows01, rows01, other));        // disjoint views of one storage
  EXPECT_NO_THROW(ops::relu_forward(rows01, rows01));      // exactly in place
  Tensor h = Tensor::empty({4, 8}, DType::f16);
  Tensor as_f16 = ops::cast(t, DType::f16);
  EXPECT_NO_THROW(ops::cast(as_f16, h));
}

TEST(Elementwise, InPlaceAliasingWorks) {
  Tensor a = random_tensor({100}, 3);
  std::vector<double> va = to_doubles(a);
  ops::add(a, a, a);  // a = 2a
  std::vector<double> got = to_doubles(a);
  for (size_t i = 0; i < va.size(); ++i) EXPECT_FLOAT_EQ(float(got[i]), float(2 * va[i]));
}

TEST(Elementwise, ReluPropagatesNaNAndBackwardIsZeroAtTheKink) {
  Tensor x = Tensor::from_vector<float>({-1.0f, 0.0f, 2.0f, std::nanf("")}, {4});
  Tensor y = Tensor::empty({4});
  ops::relu_forward(x, y);
  std::vector<float> v = y.to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_EQ(v[2], 2.0f);
  EXPECT_TRUE(std::isnan(v[3]));
  Tensor dy = Tensor::from_vector<float>({5, 5, 5, 5}, {4}), dx = Tensor::empty({4});
  ops::relu_backward(x, dy, dx);
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{0, 0, 5, 0}));
}

TEST(Elementwise, ReluGradientMatchesCentralDifferences) {
  Tensor x = random_tensor({4, 9}, 4);
  Tensor w = random_tensor({4, 9}, 5);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  auto loss = [&] {
    ops::relu_forward(x, y);
    return test::weighted_sum(y, w);
  };
  ops::relu_backward(x, w, dx);
  test::GradCheckOptions opt;
  opt.skip = [&](int64_t i) { return std::fabs(x.data<float>()[i]) < 1e-2f; };  // the kink
  EXPECT_TRUE(test::check_gradient(loss, x, dx, opt));
}

TEST(Fill, EveryDtype) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    Tensor t = Tensor::empty({5}, dt);
    ops::fill(t, 3.0);
    for (double v : to_doubles(t)) EXPECT_EQ(v, 3.0) << dtype_name(dt);
  }
}

TEST(Cast, EveryPairOfDtypes) {
  // Values exactly representable in every dtype survive any cast.
  const std::vector<float> exact{-3, -1, 0, 1, 2, 7, 64};
  for (DType from : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    Tensor src = ops::cast(Tensor::from_vector(exact, {7}), from);
    for (DType to : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
      Tensor dst = ops::cast(src, to);
      EXPECT_EQ(dst.dtype(), to);
      std::vector<double> got = to_doubles(dst);
      for (size_t i = 0; i < exact.size(); ++i)
        EXPECT_EQ(got[i], double(exact[i])) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
  // Float to integer truncates toward zero, as static_cast does.
  Tensor f = Tensor::from_vector<float>({2.7f, -2.7f}, {2});
  EXPECT_EQ(ops::cast(f, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{2, -2}));
  // Float to bf16 rounds to 8 significant bits: 1 + 2^-6 survives, 1 + 2^-9 does not.
  Tensor r = ops::cast(Tensor::from_vector<float>({1.015625f, 1.001953125f}, {2}), DType::bf16);
  EXPECT_EQ(to_doubles(r), (std::vector<double>{1.015625, 1.0}));
}

TEST(Elementwise, BadArgumentsNameTheOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2}), out = Tensor::zeros({2, 3});
  try {
    ops::add(a, b, out);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  }
  Tensor i = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(ops::relu_forward(i, i), Error);           // integers: not floating
  EXPECT_THROW(ops::add(a, ops::cast(a, DType::f16), out), Error);  // dtype mismatch
  Tensor undefined;
  EXPECT_THROW(ops::scale(undefined, 2), Error);
}

}  // namespace
}  // namespace gridnn
