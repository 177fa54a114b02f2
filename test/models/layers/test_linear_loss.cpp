// nn::Linear and nn::SoftmaxCrossEntropy (with the cross-entropy kernels of
// kernels/softmax.h) against the double loops of test/ops/reference_layers.h, gradient
// checks, and bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "test/ops/reference_layers.h"
#include "test/support/error_message.h"
#include "test/support/grad_check.h"
#include "test/support/layer_check.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using test::from_doubles;
using test::random_tensor;
using test::to_doubles;

// ---- Linear ----------------------------------------------------------------------------

TEST(Linear, ParametersAndPyTorchInitialization) {
  nn::Linear fc(50, 7);
  fc.initialize(1);
  auto params = fc.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second->value.shape(), (Shape{7, 50}));
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[1].second->value.shape(), (Shape{7}));
  const double bound = 1.0 / std::sqrt(50.0);
  for (auto& [name, p] : params) {
    double max_abs = 0;
    for (double v : to_doubles(p->value)) max_abs = std::max(max_abs, std::fabs(v));
    EXPECT_LT(max_abs, bound) << name;
    EXPECT_GT(max_abs, 0.5 * bound) << name;
  }
  nn::Linear no_bias(3, 2, false);
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
}

TEST(Linear, ForwardMatchesDoubleReference) {
  for (bool bias : {true, false})
    for (int64_t n : {1, 5}) {
      SCOPED_TRACE(::testing::Message() << "bias " << bias << " n " << n);
      nn::Linear fc(13, 9, bias);
      fc.initialize(3);
      Tensor x = random_tensor({n, 13}, 4);
      Tensor y = fc.forward(x);
      auto params = fc.named_parameters();
      std::vector<double> b = bias ? to_doubles(params[1].second->value) : std::vector<double>{};
      std::vector<double> w = to_doubles(params[0].second->value);
      std::vector<double> ref = test::reference_linear(to_doubles(x), w, b, n, 13, 9);
      EXPECT_TRUE(test::tensors_close(y, from_doubles(ref, {n, 9}), {1e-6, 1e-5}));
    }
}

TEST(Linear, GradientsMatchCentralDifferences) {
  for (int64_t n : {1, 4}) {
    SCOPED_TRACE(n);
    nn::Linear fc(11, 6);
    fc.initialize(8);
    Tensor x = random_tensor({n, 11}, 9);
    EXPECT_TRUE(test::check_layer_gradients(fc, x));
  }
}

TEST(Linear, ParameterGradientsAccumulate) {
  nn::Linear fc(4, 3);
  fc.initialize(2);
  Tensor x = random_tensor({3, 4}, 5), dy = random_tensor({3, 3}, 6);
  fc.forward(x);
  fc.backward(dy);
  Tensor once = fc.named_parameters()[1].second->grad.clone();
  fc.forward(x);
  fc.backward(dy);
  ops::scale(once, 2.0f);
  EXPECT_TRUE(test::tensors_close(fc.named_parameters()[1].second->grad, once));
}

TEST(Linear, BadInputNamesLayerAndShapes) {
  nn::Linear fc(8, 3);
  std::string m = test::error_message([&] { fc.forward(random_tensor({2, 7}, 1)); });
  EXPECT_NE(m.find("Linear(8, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 7]"), std::string::npos) << m;
  m = test::error_message([&] { fc.backward(random_tensor({2, 3}, 1)); });
  EXPECT_NE(m.find("before forward"), std::string::npos) << m;
  fc.forward(random_tensor({2, 8}, 1));
  m = test::error_message([&] { fc.backward(random_tensor({2, 4}, 1)); });
  EXPECT_NE(m.find("Linear(8, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
  EXPECT_THROW(nn::Linear(0, 3), Error);
}

// ---- SoftmaxCrossEntropy ---------------------------------------------------------------

Tensor labels_of(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {int64_t(v.size())}); }

TEST(SoftmaxCrossEntropy, MatchesDoubleReference) {
  struct Case {
    int64_t n, classes;
  };
  for (Case c : {Case{1, 1}, Case{1, 5}, Case{7, 3}, Case{4, 101}}) {
    SCOPED_TRACE(::testing::Message() << c.n << " x " << c.classes);
    Tensor logits = random_tensor({c.n, c.classes}, 12, -4, 4);
    std::vector<int64_t> lab;
    for (int64_t i = 0; i < c.n; ++i) lab.push_back((i * 7 + 3) % c.classes);
    nn::SoftmaxCrossEntropy loss;
    const float l = loss.forward(logits, labels_of(lab));
    const test::CrossEntropyReference r = test::reference_cross_entropy(to_doubles(logits), lab, c.classes);
    const double ref = r.mean();
    std::vector<double> grad = test::reference_cross_entropy_grad(r.probs, lab, c.classes, 1.0 / double(c.n));
    EXPECT_NEAR(l, ref, 1e-5 * std::max(1.0, std::fabs(ref)));
    EXPECT_NEAR(loss.loss_sum(), ref * double(c.n), 1e-5 * std::max(1.0, std::fabs(ref * c.n)));
    EXPECT_TRUE(test::tensors_close(loss.backward(), from_doubles(grad, logits.shape()), {1e-7, 1e-5}));
    // The distributed version divides by the global batch.
    grad = test::reference_cross_entropy_grad(r.probs, lab, c.classes, 1.0 / 32.0);
    EXPECT_TRUE(test::tensors_close(loss.backward(32), from_doubles(grad, logits.shape()), {1e-7, 1e-5}));
  }
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  Tensor logits = Tensor::from_vector(std::vector<float>{1000.0f, -1000.0f, 0.0f, 500.0f, 500.0f, 500.0f}, {2, 3});
  nn::SoftmaxCrossEntropy loss;
  const float l = loss.forward(logits, labels_of({1, 2}));
  // Row 0: lse = 1000, loss 2000; row 1: log 3.
  EXPECT_NEAR(l, (2000.0 + std::log(3.0)) / 2.0, 1e-3);
  for (double g : to_doubles(loss.backward())) EXPECT_TRUE(std::isfinite(g));
}

TEST(SoftmaxCrossEntropy, GradientMatchesCentralDifferences) {
  Tensor logits = random_tensor({5, 6}, 21, -3, 3);
  Tensor labels = labels_of({0, 5, 2, 2, 3});
  nn::SoftmaxCrossEntropy loss;
  loss.forward(logits, labels);
  Tensor grad = loss.backward();
  auto f = [&] {
    nn::SoftmaxCrossEntropy l;
    return double(l.forward(logits, labels));
  };
  test::GradCheckOptions o;
  o.atol = 2e-4;
  EXPECT_TRUE(test::check_gradient(f, logits, grad, o));
}

TEST(SoftmaxCrossEntropy, LinearThenLossEndToEnd) {
  // dL/dx through Linear and the loss matches central differences of the scalar loss.
  nn::Linear fc(7, 4);
  fc.initialize(4);
  Tensor x = random_tensor({3, 7}, 5);
  Tensor labels = labels_of({3, 0, 1});
  nn::SoftmaxCrossEntropy loss;
  loss.forward(fc.forward(x), labels);
  fc.zero_grad();
  Tensor dx = fc.backward(loss.backward());
  auto f = [&] {
    nn::SoftmaxCrossEntropy l;
    return double(l.forward(fc.forward(x), labels));
  };
  test::GradCheckOptions o;
  o.atol = 2e-4;
  EXPECT_TRUE(test::check_gradient(f, x, dx, o));
  Tensor dw = fc.named_parameters()[0].second->grad.clone();
  EXPECT_TRUE(test::check_gradient(f, fc.named_parameters()[0].second->value, dw, o));
}

TEST(SoftmaxCrossEntropy, BadLabelsNameTheLabelAndClassCount) {
  nn::SoftmaxCrossEntropy loss;
  Tensor logits = random_tensor({3, 4}, 1);
  std::string m = test::error_message([&] { loss.forward(logits, labels_of({0, 4, 1})); });
  EXPECT_NE(m.find("SoftmaxCrossEntropy"), std::string::npos) << m;
  EXPECT_NE(m.find("label 4"), std::string::npos) << m;
  EXPECT_NE(m.find("4 classes"), std::string::npos) << m;
  m = test::error_message([&] { loss.forward(logits, labels_of({0, -1, 1})); });
  EXPECT_NE(m.find("label -1"), std::string::npos) << m;
  m = test::error_message([&] { loss.forward(logits, labels_of({0, 1})); });
  EXPECT_NE(m.find("SoftmaxCrossEntropy"), std::string::npos) << m;
  EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
  m = test::error_message([&] { loss.forward(logits, Tensor::zeros({3}, DType::i32)); });
  EXPECT_NE(m.find("i64"), std::string::npos) << m;
  nn::SoftmaxCrossEntropy fresh;
  EXPECT_THROW(fresh.backward(), Error);
}

}  // namespace
}  // namespace gridnn
