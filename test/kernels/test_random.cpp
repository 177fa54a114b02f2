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

TEST(Random, ADepthSlabDrawsTheSameValuesAsTheWhole) {
  // A domain-parallel rank holds planes [1, 3) of the depth dimension of [N, C, D, H, W].
  const Shape global{2, 3, 4, 2, 5};
  Tensor full = Tensor::empty(global);
  ops::uniform_(full, -1, 1, {9, philox_stream_id("x")});
  Tensor slab = Tensor::empty({2, 3, 2, 2, 5});
  ops::uniform_(slab, -1, 1, ops::RandomKey::box(9, philox_stream_id("x"), global, {0, 0, 1, 0, 0}));
  std::vector<float> f = full.to_vector<float>(), s = slab.to_vector<float>();
  size_t k = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t d = 1; d < 3; ++d)
        for (int64_t hw = 0; hw < 10; ++hw, ++k)
          ASSERT_EQ(s[k], f[size_t(((n * 3 + c) * 4 + d) * 10 + hw)]) << "n " << n << " c " << c << " d " << d;
  // A box that does not fit, or of the wrong rank, is an error.
  EXPECT_THROW(ops::uniform_(slab, -1, 1, ops::RandomKey::box(9, 1, global, {0, 0, 3, 0, 0})), Error);
  EXPECT_THROW(ops::uniform_(slab, -1, 1, ops::RandomKey::box(9, 1, global, {0, 0, 1})), Error);
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
