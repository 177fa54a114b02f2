// Conv3d's contracts the op harness does not express (its values against double loops, its
// gradients and the CUDA backend are cases of test/ops/cases_conv3d.cpp): the output size
// formula, determinism across calls, accumulation of the parameter gradients, PyTorch's
// names and initialization bounds, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/conv3d.h"
#include "kernels/elementwise.h"
#include "models/layers/conv3d.h"
#include "test/support/conv3d_cases.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using ops::Triple;

using Case = test::Conv3dCase;
using test::geometry_of;
const std::vector<Case>& cases() { return test::conv3d_cases(); }

Shape x_shape(const Case& k) { return {k.n, k.c, k.in[0], k.in[1], k.in[2]}; }
Shape w_shape(const Case& k) { return {k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}; }

constexpr test::Tolerance kTol{1e-4, 1e-4};

TEST(Conv3dOps, OutputSizeFollowsTheFormula) {
  auto g = ops::conv3d_geometry("t", 1, 1, {7, 3, 1}, {2, 2, 1}, {3, 1, 0}, {64, 9, 5});
  EXPECT_EQ(g.out_size[0], 32);  // (64 + 6 - 7) / 2 + 1
  EXPECT_EQ(g.out_size[1], 5);   // (9 + 2 - 3) / 2 + 1
  EXPECT_EQ(g.out_size[2], 5);
  EXPECT_EQ(ops::conv3d_output_shape(g, 2), (Shape{2, 1, 32, 5, 5}));
}

TEST(Conv3dOps, AreDeterministic) {
  const Case& k = cases().back();  // threaded loops
  const ops::Conv3dGeometry g = geometry_of(k);
  Tensor x = test::random_tensor(x_shape(k), 1), w = test::random_tensor(w_shape(k), 2);
  Tensor dy = test::random_tensor(ops::conv3d_output_shape(g, k.n), 4);
  Tensor dx1 = Tensor::empty(x.shape()), dx2 = Tensor::empty(x.shape());
  Tensor dw1 = Tensor::zeros(w.shape()), dw2 = Tensor::zeros(w.shape());
  ops::conv3d_backward_data(dy, w, g, dx1);
  ops::conv3d_backward_data(dy, w, g, dx2);
  ops::conv3d_backward_filter(x, dy, g, dw1);
  ops::conv3d_backward_filter(x, dy, g, dw2);
  EXPECT_TRUE(test::tensors_equal(dx1, dx2));
  EXPECT_TRUE(test::tensors_equal(dw1, dw2));
}

// ---- the layer -----------------------------------------------------------------------

std::unique_ptr<nn::Conv3d> layer_for(const Case& k, bool bias = true) {
  auto conv = std::make_unique<nn::Conv3d>(k.c, k.o, k.kernel, k.stride, k.padding, bias);
  conv->initialize(11);
  return conv;
}

TEST(Conv3dLayer, ParameterGradientsAccumulateDataGradientOverwrites) {
  const Case& k = cases()[6];
  auto conv = layer_for(k);
  Tensor x = test::random_tensor(x_shape(k), 41);
  Tensor y = conv->forward(x);
  Tensor dy = test::random_tensor(y.shape(), 42);
  Tensor dx1 = conv->backward(dy);
  Tensor dw1 = conv->weight().grad.clone(), db1 = conv->bias()->grad.clone();
  conv->forward(x);
  Tensor dx2 = conv->backward(dy);
  ops::scale(dw1, 2.0f);
  ops::scale(db1, 2.0f);
  EXPECT_TRUE(test::tensors_close(conv->weight().grad, dw1, kTol)) << "dw after two backwards = 2x";
  EXPECT_TRUE(test::tensors_close(conv->bias()->grad, db1, kTol)) << "db after two backwards = 2x";
  EXPECT_TRUE(test::tensors_equal(dx1, dx2)) << "dx is not accumulated";
  conv->zero_grad();
  for (double v : test::to_doubles(conv->weight().grad)) ASSERT_EQ(v, 0.0);
}

TEST(Conv3dLayer, ParametersFollowPyTorchNamesAndInitialization) {
  nn::Conv3d conv(4, 6, Triple{3, 2, 1});
  auto params = conv.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second->value.shape(), (Shape{6, 4, 3, 2, 1}));
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[1].second->value.shape(), (Shape{6}));
  EXPECT_EQ(nn::Conv3d(4, 6, 3, 1, 1, false).named_parameters().size(), 1u);

  conv.initialize(3);
  const double bound = 1.0 / std::sqrt(4.0 * 3 * 2 * 1);
  for (auto& [name, p] : params) {
    auto v = test::to_doubles(p->value);
    double lo = 1e9, hi = -1e9;
    for (double e : v) {
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
    EXPECT_GE(lo, -bound) << name;
    EXPECT_LT(hi, bound) << name;
    EXPECT_GT(hi - lo, bound * (name == "weight" ? 1.5 : 0.2)) << name << ": values should spread";
  }
}

// ---- errors --------------------------------------------------------------------------

// Runs f, expects gridnn::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

TEST(Conv3dLayer, BadInputsNameTheLayerAndShapes) {
  nn::Conv3d conv(3, 4, 3, 1, 0);
  conv.initialize(1);
  expect_error(
      [&] {
        conv.forward(test::random_tensor({2, 5, 6, 6, 6}, 1));
      },
      {"Conv3d", "[2, 5, 6, 6, 6]", "5 channels", "expects 3", "[4, 3, 3, 3, 3]"});
  expect_error([&] { conv.forward(test::random_tensor({3, 6, 6, 6}, 1)); }, {"Conv3d", "5-D", "[3, 6, 6, 6]"});
  expect_error(
      [&] {
        conv.forward(test::random_tensor({1, 3, 6, 2, 6}, 1));
      },
      {"Conv3d", "[1, 3, 6, 2, 6]", "larger than the padded input", "height", "kernel [3, 3, 3]"});
  expect_error([&] { conv.backward(test::random_tensor({1, 4, 4, 4, 4}, 1)); }, {"Conv3d", "before forward"});
  conv.forward(test::random_tensor({1, 3, 6, 6, 6}, 1));
  expect_error(
      [&] {
        conv.backward(test::random_tensor({1, 4, 3, 4, 4}, 1));
      },
      {"Conv3d", "[1, 4, 3, 4, 4]", "[1, 4, 4, 4, 4]"});
  expect_error([&] { nn::Conv3d(3, 4, Triple{3, 0, 3}); }, {"Conv3d", "[3, 0, 3]"});
  expect_error([&] { nn::Conv3d(0, 4, 3); }, {"Conv3d", "positive"});
}

TEST(Conv3dOps, BadArgumentsNameTheOpAndShapes) {
  const auto g = ops::conv3d_geometry("t", 2, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {4, 4, 4});
  Tensor x = test::random_tensor({1, 2, 4, 4, 4}, 1), w = test::random_tensor({3, 2, 3, 3, 3}, 2);
  Tensor y = Tensor::empty({1, 3, 4, 4, 4});
  Tensor bad_w = test::random_tensor({3, 2, 3, 3, 1}, 2);
  expect_error([&] { ops::conv3d_forward(x, bad_w, Tensor(), g, y); },
               {"conv3d_forward", "[3, 2, 3, 3, 1]", "[3, 2, 3, 3, 3]"});
  Tensor bad_y = Tensor::empty({1, 3, 4, 4, 5});
  expect_error([&] { ops::conv3d_forward(x, w, Tensor(), g, bad_y); }, {"conv3d_forward", "[1, 3, 4, 4, 5]"});
  expect_error([&] { ops::conv3d_forward(x, w, test::random_tensor({4}, 3), g, y); }, {"conv3d_forward", "bias"});
  Tensor dx = Tensor::empty({1, 2, 4, 4, 3});
  expect_error([&] { ops::conv3d_backward_data(y, w, g, dx); }, {"conv3d_backward_data", "[1, 2, 4, 4, 3]"});
  Tensor dw = Tensor::zeros({3, 2, 3, 3, 3}, DType::bf16);
  expect_error([&] { ops::conv3d_backward_filter(x, y, g, dw); }, {"conv3d_backward_filter", "f32"});
  Tensor db = Tensor::zeros({2});
  expect_error([&] { ops::conv3d_backward_bias(y, db); }, {"conv3d_backward_bias", "[2]", "[3]"});
  expect_error(
      [&] {
        ops::conv3d_geometry("probe", 1, 1, {3, 3, 3}, {1, 0, 1}, {0, 0, 0}, {4, 4, 4});
      },
      {"probe", "stride [1, 0, 1]"});
  expect_error(
      [&] {
        ops::conv3d_geometry("probe", 1, 1, {5, 3, 3}, {1, 1, 1}, {0, 0, 0}, {4, 4, 4});
      },
      {"probe", "larger than the padded input", "depth"});
  expect_error(
      [&] {
        ops::conv3d_geometry("probe", 1, 1, {3, 3, 3}, {1, 1, 1}, {-1, 0, 0}, {4, 4, 4});
      },
      {"probe", "negative"});
}

}  // namespace
}  // namespace gridnn
