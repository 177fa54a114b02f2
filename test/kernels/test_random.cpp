// Random init: ranges, moments, split invariance and the Kaiming/Xavier scales.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "kernels/random.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::to_doubles;

struct Moments {
  double mean, var, min, max;
};
Moments moments(const Tensor& t) {
  std::vector<double> v = to_doubles(t);
  double s = 0, ss = 0, lo = INFINITY, hi = -INFINITY;
  for (double x : v) {
    s += x;
    ss += x * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  double mean = s / double(v.size());
  return {mean, ss / double(v.size()) - mean * mean, lo, hi};
}

TEST(Random, UniformRangeAndMoments) {
  Tensor t = Tensor::empty({100000});
  ops::uniform_(t, -2.0f, 3.0f, {7, 1});
  Moments m = moments(t);
  EXPECT_GE(m.min, -2.0);
  EXPECT_LT(m.max, 3.0);
  EXPECT_NEAR(m.mean, 0.5, 0.03);
  EXPECT_NEAR(m.var, 25.0 / 12.0, 0.05);
}

TEST(Random, NormalMoments) {
  Tensor t = Tensor::empty({100000});
  ops::normal_(t, 1.0f, 2.0f, {7, 2});
  Moments m = moments(t);
  EXPECT_NEAR(m.mean, 1.0, 0.03);
  EXPECT_NEAR(m.var, 4.0, 0.08);
}

TEST(Random, ASliceDrawsTheSameValuesAsTheWhole) {
  // The heart of grid invariance: rows [4, 10) initialized alone, with offset = index of
  // their first element, equal those rows of the full tensor.
  Tensor full = Tensor::empty({10, 6});
  ops::normal_(full, 0, 1, {123, philox_stream_id("fc1.weight")});
  Tensor part = Tensor::empty({6, 6});
  ops::normal_(part, 0, 1, {123, philox_stream_id("fc1.weight"), 4 * 6});
  EXPECT_TRUE(test::tensors_equal(part, full.narrow(4, 6)));
  Tensor other = Tensor::empty({10, 6});
  ops::normal_(other, 0, 1, {123, philox_stream_id("fc2.weight")});
  EXPECT_FALSE(test::tensors_equal(other, full));
}

TEST(Random, KaimingAndXavierScales) {
  const int64_t fan_in = 27 * 16, fan_out = 32;
  Tensor w = Tensor::empty({200, fan_in});
  ops::kaiming_normal_(w, fan_in, {1, 3});
  EXPECT_NEAR(moments(w).var, 2.0 / double(fan_in), 0.05 * 2.0 / double(fan_in));
  ops::kaiming_uniform_(w, fan_in, {1, 4});
  Moments ku = moments(w);
  double bound = std::sqrt(2.0) * std::sqrt(3.0 / double(fan_in));
  EXPECT_LE(ku.max, bound);
  EXPECT_GE(ku.min, -bound);
  EXPECT_NEAR(ku.var, 2.0 / double(fan_in), 0.05 * 2.0 / double(fan_in));
  ops::xavier_uniform_(w, fan_in, fan_out, {1, 5});
  EXPECT_NEAR(moments(w).var, 2.0 / double(fan_in + fan_out), 0.05 * 2.0 / double(fan_in + fan_out));
}

TEST(Random, HalfDtypesAndBadArguments) {
  Tensor h = Tensor::empty({1000}, DType::bf16);
  ops::uniform_(h, 0, 1, {1, 6});
  Moments m = moments(h);
  EXPECT_GE(m.min, 0.0);
  EXPECT_LE(m.max, 1.0);
  Tensor i = Tensor::empty({4}, DType::i32);
  EXPECT_THROW(ops::uniform_(i, 0, 1, {1, 1}), Error);
  Tensor f = Tensor::empty({4});
  EXPECT_THROW(ops::uniform_(f, 1, 0, {1, 1}), Error);
  EXPECT_THROW(ops::normal_(f, 0, -1, {1, 1}), Error);
  EXPECT_THROW(ops::kaiming_normal_(f, 0, {1, 1}), Error);
  EXPECT_THROW(ops::normal_(f, 0, 1, {1, 1, -1}), Error);
}

}  // namespace
}  // namespace gridnn
