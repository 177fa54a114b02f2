// Pooling (kernels/pool3d.h) and batch normalization (kernels/batchnorm.h, nn::BatchNorm3d)
// on cuda:0 against the CPU backend (label gpu: skipped without a CUDA device).
//
// Pooling bodies only compare, add and divide, so both backends must agree bit for bit;
// the batch-norm channel sums use the same lanes and tree in double with no FMA
// contraction on either backend (bitwise too). The layer's outputs are compared within
// tight tolerances.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/pool3d.h"
#include "models/layers/batchnorm3d.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {
namespace {

using GpuPoolNorm = GpuTest;

struct PoolCase {
  Shape x;
  ops::Pool3dParams p;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> all = {
      {{2, 3, 7, 6, 5}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}},
      {{1, 2, 6, 5, 7}, {{3, 2, 3}, {2, 1, 3}, {1, 0, 1}}},
      {{2, 8, 32, 33, 31},
       {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}},  // more outputs than the grid's threads
  };
  return all;
}

TEST_F(GpuPoolNorm, MaxPoolMatchesCpuBitwise) {
  for (DType dt : kFloatingTypes)
    for (const PoolCase& c : pool_cases()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + c.x.str());
      Tensor x = random_tensor(c.x, 1, -2, 2, dt);
      Shape ys = ops::pool3d_output_shape("test", c.x, c.p);
      Tensor y = Tensor::empty(ys, dt), idx = Tensor::empty(ys, DType::i64);
      Tensor gy = Tensor::empty(ys, dt, gpu()), gidx = Tensor::empty(ys, DType::i64, gpu());
      ops::max_pool3d_forward(x, c.p, y, idx);
      ops::max_pool3d_forward(on_gpu(x), c.p, gy, gidx);
      EXPECT_TRUE(tensors_equal(gy, y));
      EXPECT_TRUE(tensors_equal(gidx, idx));
      Tensor dy = random_tensor(ys, 2, -1, 1, dt);
      Tensor dx = Tensor::empty(c.x, dt), gdx = Tensor::empty(c.x, dt, gpu());
      ops::max_pool3d_backward(dy, idx, c.p, dx);
      ops::max_pool3d_backward(on_gpu(dy), gidx, c.p, gdx);
      EXPECT_TRUE(tensors_equal(gdx, dx));
    }
}

TEST_F(GpuPoolNorm, AvgAndGlobalAvgPoolMatchCpuBitwise) {
  for (DType dt : kFloatingTypes)
    for (const PoolCase& c : pool_cases()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + c.x.str());
      Tensor x = random_tensor(c.x, 3, -2, 2, dt);
      Shape ys = ops::pool3d_output_shape("test", c.x, c.p);
      Tensor y = Tensor::empty(ys, dt), gy = Tensor::empty(ys, dt, gpu());
      ops::avg_pool3d_forward(x, c.p, y);
      ops::avg_pool3d_forward(on_gpu(x), c.p, gy);
      EXPECT_TRUE(tensors_equal(gy, y));
      Tensor dy = random_tensor(ys, 4, -1, 1, dt);
      Tensor dx = Tensor::empty(c.x, dt), gdx = Tensor::empty(c.x, dt, gpu());
      ops::avg_pool3d_backward(dy, c.p, dx);
      ops::avg_pool3d_backward(on_gpu(dy), c.p, gdx);
      EXPECT_TRUE(tensors_equal(gdx, dx));

      Shape gs{c.x[0], c.x[1]};
      Tensor m = Tensor::empty(gs, dt), gm = Tensor::empty(gs, dt, gpu());
      ops::global_avg_pool3d_forward(x, m);
      ops::global_avg_pool3d_forward(on_gpu(x), gm);
      EXPECT_TRUE(tensors_equal(gm, m)) << "global forward";
      Tensor gdy = random_tensor(gs, 5, -1, 1, dt);
      ops::global_avg_pool3d_backward(gdy, dx);
      ops::global_avg_pool3d_backward(on_gpu(gdy), gdx);
      EXPECT_TRUE(tensors_equal(gdx, dx)) << "global backward";
    }
}

TEST_F(GpuPoolNorm, BatchNormChannelSumsMatchCpuBitwise) {
  for (DType dt : kFloatingTypes)
    for (Shape s : {Shape{2, 3, 3, 4, 5}, Shape{4, 16, 17, 19, 23}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + s.str());
      const int64_t c = s[1];
      Tensor x = random_tensor(s, 6, -1, 3, dt), dy = random_tensor(s, 7, -1, 1, dt);
      Tensor shift = random_tensor({c}, 8), invstd = random_tensor({c}, 9, 0.5f, 2.0f);
      Tensor sums = Tensor::empty({2, c}), gsums = Tensor::empty({2, c}, DType::f32, gpu());
      ops::batchnorm_channel_sums(x, shift, sums);
      ops::batchnorm_channel_sums(on_gpu(x), on_gpu(shift), gsums);
      EXPECT_TRUE(tensors_equal(gsums, sums)) << "statistics sums";
      ops::batchnorm_channel_sums(x, Tensor(), sums);
      ops::batchnorm_channel_sums(on_gpu(x), Tensor(), gsums);
      EXPECT_TRUE(tensors_equal(gsums, sums)) << "statistics sums, no shift";
      ops::batchnorm_backward_sums(x, dy, shift, invstd, sums);
      ops::batchnorm_backward_sums(on_gpu(x), on_gpu(dy), on_gpu(shift), on_gpu(invstd), gsums);
      EXPECT_TRUE(tensors_equal(gsums, sums)) << "backward sums";
    }
}

TEST_F(GpuPoolNorm, BatchNormLayerMatchesCpuInTrainAndEval) {
  Shape s{3, 5, 6, 7, 5};
  nn::BatchNorm3d cpu_bn(5), gpu_bn(5, 1e-5, 0.1, gpu());
  Tensor w = random_tensor({5}, 10, 0.5f, 2.0f), b = random_tensor({5}, 11);
  cpu_bn.weight().value.copy_from(w);
  cpu_bn.bias().value.copy_from(b);
  gpu_bn.weight().value.copy_from(w);
  gpu_bn.bias().value.copy_from(b);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("train step " + std::to_string(step));
    Tensor x = random_tensor(s, 12 + uint64_t(step), -1, 4),
           dy = random_tensor(s, 20 + uint64_t(step));
    EXPECT_TRUE(tensors_close(gpu_bn.forward(on_gpu(x)), cpu_bn.forward(x), {1e-6, 1e-5}));
    EXPECT_TRUE(tensors_close(gpu_bn.backward(on_gpu(dy)), cpu_bn.backward(dy), {1e-6, 1e-5}));
  }
  EXPECT_TRUE(tensors_close(gpu_bn.weight().grad, cpu_bn.weight().grad, {1e-6, 1e-6}));
  EXPECT_TRUE(tensors_close(gpu_bn.bias().grad, cpu_bn.bias().grad, {1e-6, 1e-6}));
  EXPECT_TRUE(tensors_close(gpu_bn.running_mean(), cpu_bn.running_mean(), {1e-7, 1e-6}));
  EXPECT_TRUE(tensors_close(gpu_bn.running_var(), cpu_bn.running_var(), {1e-7, 1e-6}));
  EXPECT_EQ(gpu_bn.num_batches_tracked().to_vector<int64_t>(), std::vector<int64_t>{2});

  cpu_bn.eval();
  gpu_bn.eval();
  Tensor x = random_tensor(s, 30), dy = random_tensor(s, 31);
  EXPECT_TRUE(tensors_close(gpu_bn.forward(on_gpu(x)), cpu_bn.forward(x), {1e-6, 1e-5})) << "eval";
  EXPECT_TRUE(tensors_close(gpu_bn.backward(on_gpu(dy)), cpu_bn.backward(dy), {1e-6, 1e-5}))
      << "eval";
  EXPECT_EQ(gpu_bn.num_batches_tracked().to_vector<int64_t>(), std::vector<int64_t>{2});
}

}  // namespace
}  // namespace gridnn::test
