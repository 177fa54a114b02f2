// Max pooling's CPU loop (kernels/cpu/pool3d.cpp runs it separably, per plane) against
// the shared per-output body it must equal bit for bit (kernels/pool3d_bodies.h, which the
// GPU runs): values and argmaxes, on inputs full of ties, signed zeros and NaNs, over
// strides 1-3, padding, clipped windows and non-cubic kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/pool3d.h"
#include "test/support/random_tensor.h"

namespace gridnn {
namespace {

struct PoolCase {
  Shape x;
  ops::Pool3dParams p;
};

TEST(MaxPool3dCpu, SeparableLoopsEqualTheSharedBody) {
  const std::vector<PoolCase> cases = {
      {{2, 3, 9, 8, 11}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}},
      {{1, 2, 7, 6, 9}, {{3, 3, 3}, {1, 1, 1}, {1, 1, 1}}},
      {{1, 2, 8, 7, 13}, {{2, 3, 4}, {3, 2, 3}, {1, 1, 2}}},
      {{2, 1, 5, 5, 5}, {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}}},
      {{1, 4, 4, 9, 7}, {{1, 3, 5}, {1, 2, 1}, {0, 1, 2}}},
      {{1, 3, 10, 6, 12}, {{5, 2, 3}, {3, 1, 3}, {2, 1, 1}}},
      // Output rows of exactly 16, 19 and 40 (rows padded to 16 lanes inside: none, 13, 8).
      {{1, 2, 5, 4, 32}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}},
      {{1, 2, 6, 5, 37}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}},
      {{2, 1, 3, 4, 40}, {{2, 3, 3}, {1, 1, 1}, {1, 1, 1}}},
      // Rows that split evenly into the stride's phases with ow <= w / sw (stage 1 over whole
      // slices): the stem's 3/2/1 on even rows, no padding, stride 3, a wide padded kernel,
      // windows that cross both ends of a short row, and ow = w / sw + 1 (per row again).
      {{1, 2, 6, 7, 24}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}},
      {{2, 1, 4, 5, 12}, {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}}},
      {{1, 2, 5, 6, 18}, {{3, 3, 3}, {3, 3, 3}, {1, 0, 1}}},
      {{1, 2, 4, 5, 20}, {{3, 2, 5}, {2, 1, 2}, {1, 0, 2}}},
      {{1, 3, 3, 4, 4}, {{2, 3, 5}, {1, 1, 1}, {1, 1, 2}}},
      {{1, 2, 4, 3, 10}, {{2, 2, 2}, {2, 2, 2}, {1, 1, 1}}},
  };
  uint64_t seed = 11;
  for (const PoolCase& c : cases) {
    // Few distinct values (ties everywhere), +-0, a NaN every 37 elements, -inf every 11,
    // and the last plane all -inf (every window keeps its first element).
    Tensor x = test::random_tensor(c.x, seed++, -3.0f, 3.0f);
    float* v = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      v[i] = std::round(v[i]);
      if (v[i] == 0.0f && i % 2) v[i] = -0.0f;
      if (i % 37 == 5) v[i] = std::nanf("");
      if (i % 11 == 3 || i >= x.numel() - c.x[2] * c.x[3] * c.x[4]) v[i] = -INFINITY;
    }
    const kernels::Pool3dGeometry g = ops::pool3d_geometry("test", c.x, c.p);
    const Shape y_shape = ops::pool3d_output_shape("test", c.x, c.p);
    Tensor y = Tensor::empty(y_shape), argmax = Tensor::empty(y_shape, DType::i64);
    ops::max_pool3d_forward(x, c.p, y, argmax);
    std::vector<float> want(size_t(y.numel()));
    std::vector<int64_t> want_at(size_t(y.numel()));
    for (int64_t o = 0; o < y.numel(); ++o) kernels::body::max_pool_at(o, v, g, want.data(), want_at.data());
    for (int64_t o = 0; o < y.numel(); ++o) {
      ASSERT_EQ(float_bits(y.data<float>()[o]), float_bits(want[size_t(o)])) << c.x.str() << " output " << o;
      ASSERT_EQ(argmax.data<int64_t>()[o], want_at[size_t(o)]) << c.x.str() << " output " << o;
    }
  }
}

}  // namespace
}  // namespace gridnn
