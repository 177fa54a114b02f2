// MaxPool3d, AvgPool3d and GlobalAvgPool3d: the contracts the op harness does not express
// (their values against double loops, their gradients and the CUDA backend are cases of
// test/ops/cases_pool3d.cpp): output shapes, PyTorch's tie, padding and default-stride rules,
// the CPU's max-pool backward against the gather the GPU runs, determinism across calls, and
// the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "kernels/pool3d.h"
#include "models/layers/pool3d.h"
#include "test/ops/reference_conv_pool_norm.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using nn::Triple3;

struct Case {
  const char* name;
  Shape x;
  Triple3 kernel, stride, padding;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"k3_s2_p1_batch1", {1, 1, 5, 5, 5}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {"k3_s2_p1_odd", {2, 3, 7, 6, 5}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {"mixed", {2, 2, 6, 5, 7}, {3, 2, 3}, {2, 1, 3}, {1, 0, 1}},
      {"k2_s2_default", {3, 2, 4, 5, 3}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}},
      {"k1_s2", {1, 2, 5, 4, 3}, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}},
      {"overlapping_s1", {2, 1, 4, 4, 4}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {"kernel_equals_padded_input", {1, 2, 3, 2, 3}, {5, 4, 5}, {1, 1, 1}, {1, 1, 1}},
  };
  return all;
}

ops::Pool3dParams params_of(const Case& c) { return {c.kernel, c.stride, c.padding}; }

// ---- ops -------------------------------------------------------------------------------

// The output shapes of the double reference (test/ops/reference_conv_pool_norm.h, shared
// with the op harness, which compares the values).
TEST(Pool3dOps, OutputShapesMatchTheReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    for (bool max : {true, false})
      EXPECT_EQ(ops::pool3d_output_shape("test", c.x, params_of(c)),
                test::reference_pool3d(max, test::random_tensor(c.x, 11), params_of(c)).y_shape);
  }
}

TEST(Pool3dOps, CpuScatterEqualsTheGatherTheGpuRuns) {
  // The CPU's max-pool backward scatters per plane; the CUDA backend runs the gather body
  // body::max_pool_backward_at. Run that body here on the host: both must give the same bits.
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = test::random_tensor(c.x, 13);
    Shape ys = ops::pool3d_output_shape("test", c.x, params_of(c));
    Tensor y = Tensor::empty(ys), idx = Tensor::empty(ys, DType::i64);
    ops::max_pool3d_forward(x, params_of(c), y, idx);
    Tensor dy = test::random_tensor(ys, 14);
    Tensor scattered = Tensor::empty(c.x), gathered = Tensor::empty(c.x);
    ops::max_pool3d_backward(dy, idx, params_of(c), scattered);
    const kernels::Pool3dGeometry g = ops::pool3d_geometry("test", c.x, params_of(c));
    for (int64_t i = 0; i < gathered.numel(); ++i)
      kernels::body::max_pool_backward_at(i, dy.data<float>(), idx.data<int64_t>(), g, gathered.data<float>());
    EXPECT_TRUE(test::tensors_equal(scattered, gathered));
  }
}

TEST(Pool3dOps, AvgCountsPaddingAsZeros) {
  // Ones, kernel 3, padding 1: a corner window holds 2*2*2 ones of 27 -> 8/27 (PyTorch's
  // count_include_pad=True), the centre of a 3^3 volume 27/27.
  Tensor x = Tensor::from_vector(std::vector<float>(27, 1.0f), {1, 1, 3, 3, 3});
  Tensor y = Tensor::empty({1, 1, 3, 3, 3});
  ops::avg_pool3d_forward(x, {{3, 3, 3}, {1, 1, 1}, {1, 1, 1}}, y);
  std::vector<float> v = y.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 8.0f / 27.0f);
  EXPECT_FLOAT_EQ(v[13], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 12.0f / 27.0f);  // an edge: 2*2*3
}

TEST(Pool3dOps, MaxTiesGoToFirstInWindowAndPaddingIsMinusInfinity) {
  // All equal, kernel 2, stride 1: window (a, b, e) starts at input (a, b, e), its first
  // element, which takes the whole gradient of that output.
  {
    Tensor x = Tensor::from_vector(std::vector<float>(27, 0.5f), {1, 1, 3, 3, 3});
    Tensor y = Tensor::empty({1, 1, 2, 2, 2}), idx = Tensor::empty({1, 1, 2, 2, 2}, DType::i64);
    ops::Pool3dParams p{{2, 2, 2}, {1, 1, 1}, {0, 0, 0}};
    ops::max_pool3d_forward(x, p, y, idx);
    std::vector<int64_t> got = idx.to_vector<int64_t>(), want;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t e = 0; e < 2; ++e) want.push_back((a * 3 + b) * 3 + e);
    EXPECT_EQ(got, want);
    Tensor dy = Tensor::from_vector(std::vector<float>(8, 1.0f), {1, 1, 2, 2, 2});
    Tensor dx = Tensor::empty({1, 1, 3, 3, 3});
    ops::max_pool3d_backward(dy, idx, p, dx);
    std::vector<float> g = dx.to_vector<float>();
    for (int64_t i = 0; i < 27; ++i)
      EXPECT_EQ(g[size_t(i)], std::count(want.begin(), want.end(), i) ? 1.0f : 0.0f) << i;
  }
  // Negative values with padding: the padding (-inf) never wins.
  {
    Tensor x = Tensor::from_vector(std::vector<float>(8, -5.0f), {1, 1, 2, 2, 2});
    Tensor y = Tensor::empty({1, 1, 2, 2, 2}), idx = Tensor::empty({1, 1, 2, 2, 2}, DType::i64);
    ops::max_pool3d_forward(x, {{2, 2, 2}, {2, 2, 2}, {1, 1, 1}}, y, idx);
    for (float v : y.to_vector<float>()) EXPECT_EQ(v, -5.0f);
    std::vector<int64_t> got = idx.to_vector<int64_t>();
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(got[size_t(i)], i);
  }
}

TEST(Pool3dOps, BackwardIsDeterministic) {
  const Case& c = cases()[5];  // overlapping windows: many outputs feed each input
  Tensor x = test::random_tensor(c.x, 15), dy;
  Tensor y = Tensor::empty(ops::pool3d_output_shape("t", c.x, params_of(c)));
  Tensor idx = Tensor::empty(y.shape(), DType::i64);
  ops::max_pool3d_forward(x, params_of(c), y, idx);
  dy = test::random_tensor(y.shape(), 16);
  Tensor a = Tensor::empty(c.x), b = Tensor::empty(c.x);
  ops::avg_pool3d_backward(dy, params_of(c), a);
  ops::avg_pool3d_backward(dy, params_of(c), b);
  EXPECT_TRUE(test::tensors_equal(a, b));
}

// ---- layers ------------------------------------------------------------------------------

TEST(Pool3dLayers, GlobalAvgPoolGivesOneValuePerSampleAndChannel) {
  nn::GlobalAvgPool3d pool;
  EXPECT_EQ(pool.forward(test::random_tensor({2, 3, 3, 4, 5}, 23)).shape(), (Shape{2, 3}));
}

TEST(Pool3dLayers, DefaultStrideIsTheKernelAsInPyTorch) {
  nn::MaxPool3d a(2), b(Triple3{3, 2, 1});
  EXPECT_EQ(a.params().stride, (Triple3{2, 2, 2}));
  EXPECT_EQ(b.params().stride, (Triple3{3, 2, 1}));
  Tensor y = nn::AvgPool3d(2).forward(test::random_tensor({1, 1, 5, 4, 3}, 1));
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2, 1}));
  // The stem's MaxPool3d(3, 2, 1) on a 7^3 volume: (7 + 2 - 3) / 2 + 1 = 4.
  EXPECT_EQ(nn::MaxPool3d(3, 2, 1).forward(test::random_tensor({1, 2, 7, 7, 7}, 2)).shape(), (Shape{1, 2, 4, 4, 4}));
}

TEST(Pool3dLayers, ErrorsNameTheLayerAndShapes) {
  nn::MaxPool3d max_pool(3, 2, 1);
  std::string e = test::error_message([&] { max_pool.forward(test::random_tensor({2, 3, 4, 4}, 1)); });
  EXPECT_NE(e.find("MaxPool3d"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3, 4, 4]"), std::string::npos) << e;

  nn::MaxPool3d big(Triple3{5, 3, 3}, Triple3{1, 1, 1}, Triple3{0, 0, 0});
  e = test::error_message([&] { big.forward(test::random_tensor({1, 1, 4, 6, 6}, 1)); });
  EXPECT_NE(e.find("MaxPool3d"), std::string::npos) << e;
  EXPECT_NE(e.find("larger than the padded input"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 1, 4, 6, 6]"), std::string::npos) << e;

  nn::AvgPool3d too_padded(Triple3{3, 3, 3}, Triple3{1, 1, 1}, Triple3{2, 1, 1});
  e = test::error_message([&] { too_padded.forward(test::random_tensor({1, 1, 6, 6, 6}, 1)); });
  EXPECT_NE(e.find("AvgPool3d"), std::string::npos) << e;
  EXPECT_NE(e.find("at most half"), std::string::npos) << e;

  EXPECT_THROW(nn::MaxPool3d(0), Error);
  EXPECT_THROW(nn::AvgPool3d(Triple3{2, 2, 2}, Triple3{1, 0, 1}), Error);

  nn::AvgPool3d avg(2);
  e = test::error_message([&] { avg.backward(Tensor::zeros({1, 1, 1, 1, 1})); });
  EXPECT_NE(e.find("AvgPool3d"), std::string::npos) << e;  // before forward
  avg.forward(test::random_tensor({1, 2, 4, 4, 4}, 1));
  e = test::error_message([&] { avg.backward(Tensor::zeros({1, 2, 3, 2, 2})); });
  EXPECT_NE(e.find("AvgPool3d"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 2, 3, 2, 2]"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 2, 2, 2, 2]"), std::string::npos) << e;

  nn::GlobalAvgPool3d gap;
  e = test::error_message([&] { gap.forward(test::random_tensor({2, 3}, 1)); });
  EXPECT_NE(e.find("GlobalAvgPool3d"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3]"), std::string::npos) << e;

  // The ops check their outputs too.
  Tensor x = test::random_tensor({1, 1, 4, 4, 4}, 1);
  Tensor y = Tensor::empty({1, 1, 3, 3, 3}), idx = Tensor::empty({1, 1, 2, 2, 2}, DType::i64);
  e = test::error_message([&] { ops::max_pool3d_forward(x, {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}}, y, idx); });
  EXPECT_NE(e.find("max_pool3d_forward"), std::string::npos) << e;
}

}  // namespace
}  // namespace gridnn
