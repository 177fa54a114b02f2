// Element-wise ops' contracts: overlap and aliasing rules, NaN through ReLU, exact casts and
// their rounding, errors. Their values on every dtype and size are op harness cases
// (test/ops/cases_elementwise.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::random_tensor;
using test::to_doubles;

TEST(Elementwise, PartlyOverlappingOutputsAreRejected) {
  Tensor t = random_tensor({4, 8}, 23);
  Tensor rows01 = t.narrow(0, 2), rows12 = t.narrow(1, 2);
  EXPECT_THROW(ops::add(rows01, rows01, rows12), Error);  // shifted by one row
  EXPECT_THROW(ops::relu_forward(rows01, rows12), Error);
  EXPECT_THROW(rows12.copy_from(rows01), Error);
  Tensor other = t.narrow(2, 2);
  EXPECT_NO_THROW(ops::add(rows01, rows01, other));    // disjoint views of one storage
  EXPECT_NO_THROW(ops::relu_forward(rows01, rows01));  // exactly in place
  Tensor h = Tensor::empty({4, 8}, DType::f16);
  Tensor as_f16 = ops::cast(t, DType::f16);
  EXPECT_NO_THROW(ops::cast(as_f16, h));
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
  const std::string m = test::error_message([&] { ops::add(a, b, out); });
  EXPECT_NE(m.find("add"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  Tensor i = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(ops::relu_forward(i, i), Error);                     // integers: not floating
  EXPECT_THROW(ops::add(a, ops::cast(a, DType::f16), out), Error);  // dtype mismatch
  Tensor undefined;
  EXPECT_THROW(ops::scale(undefined, 2), Error);
}

}  // namespace
}  // namespace gridnn
