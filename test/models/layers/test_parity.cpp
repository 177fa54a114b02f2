// PyTorch parity for every layer: test/parity/make_layer_fixtures.py ran each layer in
// PyTorch (float64) on a small input with random parameters and stored the input, the
// parameters, a loss weight w, the output and the gradients of L = sum(y * w). Here the same
// parameters go into gridnn's layer (fp32 CPU), and every output, input gradient, parameter
// gradient and buffer must agree within a relative error of 1e-5 per tensor (docs/design.md §9).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "models/layers/pool3d.h"
#include "test/support/parity_fixture.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

constexpr double kTolerance = 1e-5;
// Some gradients are zero in exact arithmetic (the key bias of attention: softmax over keys
// ignores a constant added to a row of scores), so both sides hold rounding noise and
// their relative error means nothing; such tensors are compared absolutely.
constexpr double kZeroFloor = 1e-5;  // about fp32 rounding of sums of O(1) terms

Tensor fixture(const std::string& name) { return test::parity_fixture("layers.safetensors", name); }

::testing::AssertionResult close(const std::string& what, const Tensor& actual, const Tensor& expected) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << what << ": shape " << actual.shape().str() << " vs "
                                         << expected.shape().str();
  double err = test::max_relative_error(actual, expected);
  if (err <= kTolerance) return ::testing::AssertionSuccess();
  double largest = 0, worst = 0;
  std::vector<double> a = test::to_doubles(actual), e = test::to_doubles(expected);
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::abs(e[i]));
    worst = std::max(worst, std::abs(a[i] - e[i]));
  }
  if (largest <= kZeroFloor && worst <= kZeroFloor) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << err << " > " << kTolerance
                                       << " (max |expected| " << largest << ", max |error| " << worst << ")";
}

// Loads the case's parameters into `layer` by PyTorch name, runs one forward and backward,
// and compares everything the fixture holds.
void expect_parity(nn::Module& layer, const std::string& name) {
  SCOPED_TRACE(name);
  for (auto& [pname, p] : layer.named_parameters()) p->value.copy_from(fixture(name + ".param." + pname));
  layer.zero_grad();
  Tensor y = layer.forward(fixture(name + ".x"));
  Tensor dx = layer.backward(fixture(name + ".w"));
  EXPECT_TRUE(close("y", y, fixture(name + ".y")));
  EXPECT_TRUE(close("dx", dx, fixture(name + ".dx")));
  for (auto& [pname, p] : layer.named_parameters())
    EXPECT_TRUE(close("grad." + pname, p->grad, fixture(name + ".grad." + pname)));
  for (auto& [bname, b] : layer.named_buffers()) {
    Tensor expected = fixture(name + ".buffer." + bname);
    if (is_floating(b->dtype()))
      EXPECT_TRUE(close("buffer." + bname, *b, expected));
    else
      EXPECT_TRUE(test::tensors_equal(*b, expected)) << "buffer." << bname;
  }
}

TEST(Parity, Conv3d) {
  nn::Conv3d k3(3, 4, 3, 2, 1);
  expect_parity(k3, "conv3d_k3_s2_p1");
  nn::Conv3d k7(2, 3, 7, 2, 3, /*bias=*/false);
  expect_parity(k7, "conv3d_k7_s2_p3_nobias");
  nn::Conv3d k1(5, 2, 1);
  expect_parity(k1, "conv3d_k1");
}

TEST(Parity, Pooling) {
  nn::MaxPool3d max_pool(3, 2, 1);
  expect_parity(max_pool, "maxpool3d_k3_s2_p1");
  nn::AvgPool3d avg_pool(2, 2);
  expect_parity(avg_pool, "avgpool3d_k2_s2");
  nn::GlobalAvgPool3d global;
  expect_parity(global, "globalavgpool3d");
}

TEST(Parity, BatchNorm3dTrainingStep) {
  nn::BatchNorm3d bn(4);
  expect_parity(bn, "batchnorm3d_train");  // running statistics and the counter included
}

TEST(Parity, Linear) {
  nn::Linear fc(10, 6);
  expect_parity(fc, "linear");
}

TEST(Parity, SelfAttention3d) {
  nn::SelfAttention3d att(16);
  expect_parity(att, "attention");  // gamma = 0.7 in the fixture
}

TEST(Parity, SoftmaxCrossEntropy) {
  nn::SoftmaxCrossEntropy loss;
  float value = loss.forward(fixture("cross_entropy.logits"), fixture("cross_entropy.labels"));
  EXPECT_NEAR(value, fixture("cross_entropy.loss").to_vector<float>()[0], kTolerance * std::abs(value));
  EXPECT_TRUE(close("dlogits", loss.backward(), fixture("cross_entropy.dlogits")));
}

}  // namespace
}  // namespace gridnn
