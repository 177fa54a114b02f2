// Softmax, cross-entropy, dropout, Linear, SoftmaxCrossEntropy and SelfAttention3d on
// cuda:0 against the CPU backend (label gpu: skipped without a CUDA device).
//
// Dropout masks come from the same Philox body and must agree bit for bit; softmax and
// cross-entropy add in the same order on both backends (only expf/logf may differ in the
// last bits); layers built on cuBLAS agree within tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/softmax.h"
#include "models/layers/attention.h"
#include "models/layers/dropout.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {
namespace {

using GpuSoftmaxAttention = GpuTest;

// Copies every parameter of `from` (CPU) into `to` (same architecture, on the GPU).
void copy_parameters(nn::Module& from, nn::Module& to) {
  auto a = from.named_parameters(), b = to.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    b[i].second->value.copy_from(a[i].second->value);
  }
}

void expect_same_grads(nn::Module& cpu, nn::Module& gpu_layer, Tolerance tol) {
  auto a = cpu.named_parameters(), b = gpu_layer.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(tensors_close(b[i].second->grad, a[i].second->grad, tol)) << a[i].first;
}

TEST_F(GpuSoftmaxAttention, SoftmaxForwardBackwardMatchCpu) {
  for (DType dt : kFloatingTypes)
    for (Shape shape : {Shape{1, 1}, Shape{7, 33}, Shape{3, 5, 1000}, Shape{4096, 64}, Shape{5, 70001}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape.str());
      Tensor x = random_tensor(shape, 1, -6, 6, dt), dy = random_tensor(shape, 2, -1, 1, dt);
      Tensor y = Tensor::empty(shape, dt), gy = Tensor::empty(shape, dt, gpu());
      ops::softmax_forward(x, y);
      ops::softmax_forward(on_gpu(x), gy);
      EXPECT_TRUE(tensors_close(gy, y, tolerance_for(dt, {1e-7, 1e-5})));
      Tensor dx = Tensor::empty(shape, dt), gdx = Tensor::empty(shape, dt, gpu());
      ops::softmax_backward(y, dy, dx);
      ops::softmax_backward(on_gpu(y), on_gpu(dy), gdx);
      EXPECT_TRUE(tensors_close(gdx, dx, tolerance_for(dt, {1e-7, 1e-5})));
      // Deterministic: a second run gives the same bits.
      Tensor gy2 = Tensor::empty(shape, dt, gpu());
      ops::softmax_forward(on_gpu(x), gy2);
      EXPECT_TRUE(tensors_equal(gy2, gy));
    }
}

TEST_F(GpuSoftmaxAttention, CrossEntropyMatchesCpu) {
  Tensor logits = random_tensor({37, 11}, 3, -5, 5);
  std::vector<int64_t> lab;
  for (int64_t i = 0; i < 37; ++i) lab.push_back((i * 5) % 11);
  Tensor labels = Tensor::from_vector(lab, {37});
  nn::SoftmaxCrossEntropy c, g;
  const float lc = c.forward(logits, labels), lg = g.forward(on_gpu(logits), on_gpu(labels));
  EXPECT_NEAR(lg, lc, 1e-5 * std::max(1.0f, std::fabs(lc)));
  EXPECT_TRUE(tensors_close(g.backward(), c.backward(), {1e-7, 1e-5}));
  EXPECT_TRUE(tensors_close(g.backward(128), c.backward(128), {1e-7, 1e-5}));
  // Device labels are not read back (a step reads nothing from the GPU): an out-of-range one
  // gives a NaN loss, where host labels are an error naming the label (kernels/softmax.cpp).
  std::vector<int64_t> bad = lab;
  bad[3] = 11;
  const Tensor bad_labels = Tensor::from_vector(bad, {37});
  EXPECT_THROW(c.forward(logits, bad_labels), Error);
  EXPECT_TRUE(std::isnan(g.forward(on_gpu(logits), on_gpu(bad_labels))));
  // Nothing sticks: good labels give the CPU's loss again.
  EXPECT_NEAR(g.forward(on_gpu(logits), on_gpu(labels)), lc, 1e-5 * std::max(1.0f, std::fabs(lc)));
}

TEST_F(GpuSoftmaxAttention, DropoutMaskMatchesCpuBitwise) {
  for (DType dt : kFloatingTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t n = (int64_t(1) << 21) + 7;
    Tensor x = random_tensor({n}, 4, -1, 1, dt);
    ops::DropoutKey key{5, 6, 7, 1000};
    Tensor y = Tensor::empty({n}, dt), gy = Tensor::empty({n}, dt, gpu());
    ops::dropout_forward(x, 0.3f, key, y);
    ops::dropout_forward(on_gpu(x), 0.3f, key, gy);
    EXPECT_TRUE(tensors_equal(gy, y));
    ops::dropout_backward(x, 0.3f, key, y);
    ops::dropout_backward(on_gpu(x), 0.3f, key, gy);
    EXPECT_TRUE(tensors_equal(gy, y));
  }
  nn::Dropout c(0.5f), g(0.5f);
  c.initialize(3);
  g.initialize(3);
  Tensor x = random_tensor({4, 8, 3, 3, 3}, 9);
  EXPECT_TRUE(tensors_equal(g.forward(on_gpu(x)), c.forward(x)));
  EXPECT_TRUE(tensors_equal(g.backward(on_gpu(x)), c.backward(x)));
}

TEST_F(GpuSoftmaxAttention, LinearMatchesCpu) {
  for (int64_t n : {1, 33}) {
    SCOPED_TRACE(n);
    nn::Linear c(70, 19), g(70, 19, true, gpu());
    c.initialize(1);
    copy_parameters(c, g);
    Tensor x = random_tensor({n, 70}, 2), dy = random_tensor({n, 19}, 3);
    EXPECT_TRUE(tensors_close(g.forward(on_gpu(x)), c.forward(x), {1e-5, 1e-5}));
    EXPECT_TRUE(tensors_close(g.backward(on_gpu(dy)), c.backward(dy), {1e-5, 1e-5}));
    expect_same_grads(c, g, {1e-5, 1e-5});
  }
}

TEST_F(GpuSoftmaxAttention, SelfAttentionMatchesCpu) {
  struct Case {
    int64_t b, c, d, h, w;
  };
  for (Case k : {Case{1, 8, 1, 1, 1}, Case{2, 16, 3, 4, 5}, Case{3, 32, 8, 8, 8}}) {
    SCOPED_TRACE(::testing::Message() << k.b << "x" << k.c << "x" << k.d << "x" << k.h << "x" << k.w);
    nn::SelfAttention3d c(k.c), g(k.c, gpu());
    c.initialize(7);
    auto params = c.named_parameters();
    ops::fill(params[0].second->value, 0.7);  // gamma
    copy_parameters(c, g);
    Tensor x = random_tensor({k.b, k.c, k.d, k.h, k.w}, 8), dy = random_tensor(x.shape(), 9);
    EXPECT_TRUE(tensors_close(g.forward(on_gpu(x)), c.forward(x), {1e-4, 1e-4}));
    EXPECT_TRUE(tensors_close(g.attention(), c.attention(), {1e-5, 1e-4}));
    EXPECT_TRUE(tensors_close(g.backward(on_gpu(dy)), c.backward(dy), {1e-4, 1e-4}));
    expect_same_grads(c, g, {1e-3, 1e-3});
  }
}

}  // namespace
}  // namespace gridnn::test
