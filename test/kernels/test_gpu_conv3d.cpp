// Conv3d on cuda:0 (cuDNN) against the CPU backend (vol2col + OpenBLAS, itself checked
// against double loops in test/models/layers/test_conv3d.cpp): forward with and without bias,
// backward data (overwrites), backward filter and bias (accumulate), on the geometries of
// the CPU tests; the cached algorithm giving the same bits on a second call; and the layer
// run on GPU tensors. Label gpu: skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/conv3d.h"
#include "kernels/elementwise.h"
#include "models/layers/conv3d.h"
#include "test/support/gpu_test.h"
#include "test/support/conv3d_cases.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {
namespace {

using GpuConv3d = GpuTest;
using ops::Triple;

using Case = Conv3dCase;

// The shared geometries plus a ResNet-sized block (16 -> 32 channels, 16^3, stride 2).
const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> v = conv3d_cases();
    v.push_back({"resnet_block", 2, 16, 32, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {16, 16, 16}});
    return v;
  }();
  return all;
}

// fp32 on both sides (no TF32): sums of a few hundred to a few thousand products.
constexpr Tolerance kTol{1e-4, 1e-4};

TEST_F(GpuConv3d, MatchesCpuBackend) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    const auto g = ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
    Tensor x = random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1);
    Tensor w = random_tensor({k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}, 2);
    Tensor bias = random_tensor({k.o}, 3);
    const Shape y_shape = ops::conv3d_output_shape(g, k.n);
    Tensor gx = on_gpu(x), gw = on_gpu(w), gbias = on_gpu(bias);

    for (bool with_bias : {true, false}) {
      Tensor y = Tensor::empty(y_shape), gy = Tensor::empty(y_shape, DType::f32, gpu());
      ops::fill(gy, std::nan(""));  // overwritten, never read
      ops::conv3d_forward(x, w, with_bias ? bias : Tensor(), g, y);
      ops::conv3d_forward(gx, gw, with_bias ? gbias : Tensor(), g, gy);
      EXPECT_TRUE(tensors_close(gy, y, kTol)) << "forward, bias " << with_bias;
    }

    Tensor dy = random_tensor(y_shape, 4), gdy = on_gpu(dy);
    Tensor dx = Tensor::empty(x.shape()), gdx = Tensor::empty(x.shape(), DType::f32, gpu());
    ops::fill(gdx, std::nan(""));
    ops::conv3d_backward_data(dy, w, g, dx);
    ops::conv3d_backward_data(gdy, gw, g, gdx);
    EXPECT_TRUE(tensors_close(gdx, dx, kTol)) << "backward data";

    Tensor dw = random_tensor(w.shape(), 5), gdw = on_gpu(dw);  // accumulate onto this
    ops::conv3d_backward_filter(x, dy, g, dw);
    ops::conv3d_backward_filter(gx, gdy, g, gdw);
    EXPECT_TRUE(tensors_close(gdw, dw, kTol)) << "backward filter";

    Tensor db = random_tensor({k.o}, 6), gdb = on_gpu(db);
    ops::conv3d_backward_bias(dy, db);
    ops::conv3d_backward_bias(gdy, gdb);
    EXPECT_TRUE(tensors_close(gdb, db, kTol)) << "backward bias";
  }
}

// The second call reuses the cached plan; the backward algorithms are chosen among
// cuDNN's deterministic ones, so repeated calls give the same bits.
TEST_F(GpuConv3d, RepeatedCallsAreDeterministic) {
  const Case& k = cases()[8];
  const auto g = ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
  Tensor gx = on_gpu(random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1));
  Tensor gw = on_gpu(random_tensor({k.o, k.c, 3, 3, 3}, 2));
  Tensor gdy = on_gpu(random_tensor(ops::conv3d_output_shape(g, k.n), 4));
  Tensor dx1 = Tensor::empty(gx.shape(), DType::f32, gpu()), dx2 = dx1.clone();
  Tensor dw1 = Tensor::zeros(gw.shape(), DType::f32, gpu()), dw2 = dw1.clone();
  Tensor db1 = Tensor::zeros({k.o}, DType::f32, gpu()), db2 = db1.clone();
  ops::conv3d_backward_data(gdy, gw, g, dx1);
  ops::conv3d_backward_data(gdy, gw, g, dx2);
  ops::conv3d_backward_filter(gx, gdy, g, dw1);
  ops::conv3d_backward_filter(gx, gdy, g, dw2);
  ops::conv3d_backward_bias(gdy, db1);
  ops::conv3d_backward_bias(gdy, db2);
  EXPECT_TRUE(tensors_equal(dx1, dx2));
  EXPECT_TRUE(tensors_equal(dw1, dw2));
  EXPECT_TRUE(tensors_equal(db1, db2));
}

// The layer with its parameters moved to the GPU gives the CPU layer's results.
TEST_F(GpuConv3d, LayerOnGpuTensorsMatchesCpu) {
  nn::Conv3d cpu_conv(2, 3, Triple{3, 3, 3}, Triple{2, 1, 2}, Triple{1, 1, 1});
  nn::Conv3d gpu_conv(2, 3, Triple{3, 3, 3}, Triple{2, 1, 2}, Triple{1, 1, 1});
  cpu_conv.initialize(7);
  gpu_conv.initialize(7);
  for (auto& [name, p] : gpu_conv.named_parameters()) {
    p->value = p->value.to(gpu());
    p->grad = p->grad.to(gpu());
  }
  Tensor x = random_tensor({2, 2, 5, 6, 7}, 8);
  Tensor y = cpu_conv.forward(x), gy = gpu_conv.forward(on_gpu(x));
  EXPECT_TRUE(tensors_close(gy, y, kTol));
  Tensor dy = random_tensor(y.shape(), 9);
  Tensor dx = cpu_conv.backward(dy), gdx = gpu_conv.backward(on_gpu(dy));
  EXPECT_TRUE(tensors_close(gdx, dx, kTol));
  EXPECT_TRUE(tensors_close(gpu_conv.weight().grad, cpu_conv.weight().grad, kTol));
  EXPECT_TRUE(tensors_close(gpu_conv.bias()->grad, cpu_conv.bias()->grad, kTol));
}

}  // namespace
}  // namespace gridnn::test
