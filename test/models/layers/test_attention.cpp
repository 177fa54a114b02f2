// Softmax kernels (kernels/softmax.h) and nn::SelfAttention3d against the double loops of
// test/ops/reference_layers.h, central-difference gradient checks, and bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/softmax.h"
#include "models/layers/attention.h"
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
using test::reference_softmax;
using test::to_doubles;

// ---- softmax kernels -------------------------------------------------------------------

TEST(Softmax, ForwardMatchesDoubleReference) {
  // Odd sizes, a single row, rows shorter and longer than the 32 lanes, a 3-D tensor.
  for (Shape shape : {Shape{1, 1}, Shape{1, 7}, Shape{5, 33}, Shape{3, 4, 100}, Shape{17, 1000}}) {
    SCOPED_TRACE(shape.str());
    Tensor x = random_tensor(shape, 11, -8, 8);
    Tensor y = Tensor::empty(shape);
    ops::softmax_forward(x, y);
    const int64_t cols = shape[shape.rank() - 1];
    Tensor ref = from_doubles(reference_softmax(to_doubles(x), x.numel() / cols, cols), shape);
    EXPECT_TRUE(test::tensors_close(y, ref, {1e-7, 1e-5}));
  }
}

TEST(Softmax, StableForHugeLogitsAndInPlace) {
  Tensor x = Tensor::from_vector(std::vector<float>{1000.0f, 1001.0f, -1000.0f, 88.0f, 89.0f, 90.0f}, {2, 3});
  Tensor y = x.clone();
  ops::softmax_forward(y, y);  // in place
  std::vector<double> ref = reference_softmax(to_doubles(x), 2, 3);
  EXPECT_TRUE(test::tensors_close(y, from_doubles(ref, {2, 3}), {1e-7, 1e-5}));
  for (double v : to_doubles(y)) EXPECT_TRUE(std::isfinite(v));
}

TEST(Softmax, BackwardMatchesDoubleReferenceAndCentralDifferences) {
  for (Shape shape : {Shape{1, 5}, Shape{4, 37}, Shape{2, 3, 65}}) {
    SCOPED_TRACE(shape.str());
    const int64_t cols = shape[shape.rank() - 1], rows = shape.numel() / cols;
    Tensor x = random_tensor(shape, 3, -2, 2), w = random_tensor(shape, 4);
    Tensor y = Tensor::empty(shape), dx = Tensor::empty(shape);
    ops::softmax_forward(x, y);
    ops::softmax_backward(y, w, dx);
    // Reference: dx = y * (dy - sum(dy * y)) from the double softmax.
    const std::vector<double> yd = reference_softmax(to_doubles(x), rows, cols);
    const std::vector<double> ref = test::reference_softmax_backward(yd, to_doubles(w), rows, cols);
    EXPECT_TRUE(test::tensors_close(dx, from_doubles(ref, shape), {1e-7, 1e-5}));
    auto loss = [&] {
      Tensor out = Tensor::empty(shape);
      ops::softmax_forward(x, out);
      return test::weighted_sum(out, w);
    };
    EXPECT_TRUE(test::check_gradient(loss, x, dx));
    // In place: dx written over dy.
    Tensor dy = w.clone();
    ops::softmax_backward(y, dy, dy);
    EXPECT_TRUE(test::tensors_equal(dy, dx));
  }
}

TEST(Softmax, HalfPrecisionStorageComputesInFloat) {
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor({6, 45}, 8, -4, 4, dt);
    Tensor y = Tensor::empty(x.shape(), dt);
    ops::softmax_forward(x, y);
    Tensor ref = from_doubles(reference_softmax(to_doubles(x), 6, 45), x.shape());
    EXPECT_TRUE(test::tensors_close(ops::cast(y, DType::f32), ref, {1e-3, dt == DType::bf16 ? 1e-2 : 2e-3}));
  }
}

TEST(Softmax, Deterministic) {
  Tensor x = random_tensor({64, 777}, 5, -5, 5);
  Tensor a = Tensor::empty(x.shape()), b = Tensor::empty(x.shape());
  ops::softmax_forward(x, a);
  ops::softmax_forward(x, b);
  EXPECT_TRUE(test::tensors_equal(a, b));
}

TEST(Softmax, BadArgumentsNameTheOp) {
  Tensor x = random_tensor({2, 3}, 1), y = Tensor::empty({3, 2});
  const std::string what = test::error_message([&] { ops::softmax_forward(x, y); });
  EXPECT_NE(what.find("softmax_forward"), std::string::npos) << what;
  EXPECT_NE(what.find("[3, 2]"), std::string::npos) << what;
  Tensor i = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(ops::softmax_forward(i, i), Error);
}

// ---- SelfAttention3d -------------------------------------------------------------------

void set_gamma(nn::SelfAttention3d& att, float g) {
  for (auto& [name, param] : att.named_parameters())
    if (name == "gamma") ops::fill(param->value, g);
}

TEST(PointwiseConv3d, MatchesDoubleReferenceAndGradients) {
  for (int64_t b : {1, 3}) {
    SCOPED_TRACE(b);
    nn::PointwiseConv3d conv(5, 3);
    conv.initialize(2);
    Tensor x = random_tensor({b, 5, 2, 3, 1}, 3);
    Tensor y = conv.forward(x);
    ASSERT_EQ(y.shape(), (Shape{b, 3, 2, 3, 1}));
    auto params = conv.named_parameters();
    EXPECT_EQ(params[0].first, "weight");
    EXPECT_EQ(params[0].second->value.shape(), (Shape{3, 5, 1, 1, 1}));
    std::vector<double> ref = test::reference_pointwise_conv3d(to_doubles(x), to_doubles(params[0].second->value),
                                                               to_doubles(params[1].second->value), b, 5, 3, 6);
    EXPECT_TRUE(test::tensors_close(y, from_doubles(ref, y.shape()), {1e-6, 1e-5}));
    EXPECT_TRUE(test::check_layer_gradients(conv, x));
  }
  nn::PointwiseConv3d conv(5, 3);
  EXPECT_THROW(conv.forward(random_tensor({1, 4, 2, 2, 2}, 1)), Error);
}

TEST(SelfAttention3d, DeterministicForwardAndBackward) {
  nn::SelfAttention3d att(16);
  att.initialize(4);
  set_gamma(att, 0.5f);
  Tensor x = random_tensor({2, 16, 3, 3, 3}, 5), dy = random_tensor(x.shape(), 6);
  Tensor y1 = att.forward(x), dx1 = att.backward(dy);
  Tensor y2 = att.forward(x), dx2 = att.backward(dy);
  EXPECT_TRUE(test::tensors_equal(y1, y2));
  EXPECT_TRUE(test::tensors_equal(dx1, dx2));
}

TEST(SelfAttention3d, ParameterNamesAndShapesFollowPyTorch) {
  nn::SelfAttention3d att(16);
  att.initialize(3);
  std::vector<std::pair<std::string, Shape>> got;
  for (auto& [name, p] : att.named_parameters()) got.emplace_back(name, p->value.shape());
  std::vector<std::pair<std::string, Shape>> want = {{"gamma", Shape{1}},      {"query.weight", Shape{2, 16, 1, 1, 1}},
                                                     {"query.bias", Shape{2}}, {"key.weight", Shape{2, 16, 1, 1, 1}},
                                                     {"key.bias", Shape{2}},   {"value.weight", Shape{16, 16, 1, 1, 1}},
                                                     {"value.bias", Shape{16}}};
  EXPECT_EQ(got, want);
  // gamma starts at 0; the convolutions are uniform(-1/sqrt(16), 1/sqrt(16)) and not all zero.
  EXPECT_EQ(to_doubles(att.named_parameters()[0].second->value)[0], 0.0);
  double max_abs = 0;
  for (double v : to_doubles(att.named_parameters()[5].second->value)) max_abs = std::max(max_abs, std::fabs(v));
  EXPECT_GT(max_abs, 0.1);
  EXPECT_LE(max_abs, 0.25);
}

TEST(SelfAttention3d, ForwardMatchesDoubleReference) {
  struct Case {
    int64_t b, c, d, h, w;
  };
  for (Case k : {Case{1, 8, 1, 1, 1}, Case{1, 8, 3, 2, 5}, Case{3, 16, 2, 3, 3}}) {
    SCOPED_TRACE(::testing::Message() << k.b << "x" << k.c << "x" << k.d << "x" << k.h << "x" << k.w);
    nn::SelfAttention3d att(k.c);
    att.initialize(17);
    set_gamma(att, 0.7f);
    Tensor x = random_tensor({k.b, k.c, k.d, k.h, k.w}, 23, -2, 2);
    Tensor y = att.forward(x);
    EXPECT_EQ(y.shape(), x.shape());
    const std::vector<double> ref = test::reference_attention(x, test::parameter_values(att)).y;
    EXPECT_TRUE(test::tensors_close(y, from_doubles(ref, x.shape()), {1e-5, 1e-4}));
    // Rows of the attention matrices sum to 1.
    const Tensor& a = att.attention();
    const int64_t n = k.d * k.h * k.w;
    EXPECT_EQ(a.shape(), (Shape{k.b, n, n}));
    std::vector<double> av = to_doubles(a);
    for (int64_t r = 0; r < k.b * n; ++r) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += av[size_t(r * n + j)];
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST(SelfAttention3d, GammaZeroIsTheIdentity) {
  nn::SelfAttention3d att(8);
  att.initialize(5);
  Tensor x = random_tensor({2, 8, 2, 2, 3}, 6);
  EXPECT_TRUE(test::tensors_equal(att.forward(x), x));
  // y = x, so dx = dy exactly.
  Tensor dy = random_tensor(x.shape(), 7);
  att.zero_grad();
  EXPECT_TRUE(test::tensors_equal(att.backward(dy), dy));
}

TEST(SelfAttention3d, GradientsWithGammaNonzero) {
  for (int64_t b : {1, 2}) {
    SCOPED_TRACE(b);
    nn::SelfAttention3d att(8);
    att.initialize(31);
    set_gamma(att, 0.7f);
    Tensor x = random_tensor({b, 8, 3, 1, 2}, 41);
    test::LayerCheckOptions o;
    o.grad.max_points = 48;
    EXPECT_TRUE(test::check_layer_gradients(att, x, o));
  }
}

TEST(SelfAttention3d, GradientsWithGammaZero) {
  // y = x: dx = dy exactly; gamma's gradient sum(dy * O) is the only nonzero parameter one.
  nn::SelfAttention3d att(8);
  att.initialize(32);
  Tensor x = random_tensor({2, 8, 1, 2, 3}, 42);
  test::LayerCheckOptions o;
  o.grad.max_points = 48;
  EXPECT_TRUE(test::check_layer_gradients(att, x, o));
  for (auto& [name, p] : att.named_parameters()) {
    const double norm = std::sqrt(test::weighted_sum(p->grad, p->grad));
    if (name == "gamma")
      EXPECT_GT(norm, 0.0) << name;
    else
      EXPECT_EQ(norm, 0.0) << name;
  }
}

TEST(SelfAttention3d, BadInputNamesLayerAndShapes) {
  const std::string made = test::error_message([&] { nn::SelfAttention3d bad(12); });
  EXPECT_NE(made.find("SelfAttention3d(12)"), std::string::npos) << made;
  EXPECT_NE(made.find("multiple of 8"), std::string::npos) << made;
  nn::SelfAttention3d att(16);
  Tensor x = random_tensor({2, 8, 2, 2, 2}, 1);
  const std::string forward = test::error_message([&] { att.forward(x); });
  EXPECT_NE(forward.find("SelfAttention3d(16)"), std::string::npos) << forward;
  EXPECT_NE(forward.find("[2, 8, 2, 2, 2]"), std::string::npos) << forward;
  EXPECT_THROW(att.forward(random_tensor({16, 4}, 1)), Error);
  EXPECT_THROW(att.backward(random_tensor({2, 16, 2, 2, 2}, 1)), Error);  // before forward
  att.forward(random_tensor({2, 16, 2, 2, 2}, 2));
  const std::string backward = test::error_message([&] { att.backward(random_tensor({2, 16, 2, 2, 3}, 1)); });
  EXPECT_NE(backward.find("SelfAttention3d(16)"), std::string::npos) << backward;
  EXPECT_NE(backward.find("[2, 16, 2, 2, 3]"), std::string::npos) << backward;
}

}  // namespace
}  // namespace gridnn
