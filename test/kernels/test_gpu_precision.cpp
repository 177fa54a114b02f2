// Precision modes on cuda:0 (cuBLAS, cuDNN) against the CPU (kernels/math_mode.h), which
// computes fp32 exactly as before and emulates tf32 and bf16 by rounding the operands.
// Label gpu: skipped without a CUDA device.
//
// Tolerances, as max |gpu - cpu| / max |cpu| over a tensor (max_relative_error):
// - fp32: the two backends differ in the order of fp32 additions only (sums of at most a
//   few thousand products): 1e-5 for GEMMs; 1e-4 for convolutions, where cuDNN may choose
//   an FFT or Winograd algorithm whose transforms round too (as the op harness's conv3d backend tolerance allows).
// - tf32 against the CPU in fp32: each operand rounded to 10 mantissa bits (relative 2^-11,
//   about 5e-4; the tensor cores may truncate, 2^-10), so each product moves by up to
//   about 1e-3 of its size; for sums of products of random signs the error relative to the
//   largest result stays below that: 3e-3 leaves room.
// - bf16 GEMM against the CPU's bf16 emulation: the products of bf16 values are exact in
//   fp32 on both sides, C is fp32 on both, so only the order of the fp32 additions
//   differs: 1e-5.
// - bf16 convolution against the CPU's emulation: the same, plus one rounding of cuDNN's
//   bf16 result (relative 2^-9 = 2e-3 per element; the classic API writes y in the
//   inputs' type): 4e-3.
// - Against the CPU in fp32, bf16 must be visibly different (> 1e-4: the operands' rounding
//   moves these sums by about 1e-3), which shows the GPU really rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/allocator.h"
#include "kernels/conv3d.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "models/layers/attention.h"
#include "models/layers/conv3d.h"
#include "test/support/conv3d_cases.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {
namespace {

using GpuPrecision = GpuTest;
using ops::MathMode;

constexpr double kFp32Gemm = 1e-5;        // fp32 vs fp32: addition order
constexpr double kFp32Conv = 1e-4;        // ... and cuDNN's transform algorithms
constexpr double kTf32VsFp32 = 3e-3;      // tf32 operands vs fp32
constexpr double kBf16GemmOrder = 1e-5;   // bf16 GEMM vs its CPU emulation: addition order
constexpr double kBf16ConvResult = 4e-3;  // bf16 conv vs its CPU emulation: + one bf16 rounding
constexpr double kRoundingShows = 1e-4;   // bf16 vs fp32 must differ by more than this

// ---- GEMM ------------------------------------------------------------------------------

Tensor gemm_on(const Tensor& a, const Tensor& b, const Tensor& c0, ops::GemmOptions o, MathMode math,
               const Device& device) {
  o.math = math;
  Tensor c = c0.to(device);
  ops::gemm_batched(a.to(device), b.to(device), c, o);
  return c;
}

TEST_F(GpuPrecision, GemmModesAgainstCpu) {
  const int64_t batch = 3, m = 45, n = 67, k = 256;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb);
      Tensor a = random_tensor(ta ? Shape{batch, k, m} : Shape{batch, m, k}, 1);
      Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);  // shared (stride 0)
      Tensor c0 = random_tensor({batch, m, n}, 3);
      ops::GemmOptions o;
      o.transpose_a = ta;
      o.transpose_b = tb;
      o.alpha = 1.25f;
      o.beta = 0.5f;
      const Tensor cpu32 = gemm_on(a, b, c0, o, MathMode::fp32, Device::cpu());
      const Tensor cpu16 = gemm_on(a, b, c0, o, MathMode::bf16, Device::cpu());
      EXPECT_LT(max_relative_error(gemm_on(a, b, c0, o, MathMode::fp32, gpu()), cpu32), kFp32Gemm) << "fp32";
      EXPECT_LT(max_relative_error(gemm_on(a, b, c0, o, MathMode::tf32, gpu()), cpu32), kTf32VsFp32) << "tf32";
      const Tensor gpu16 = gemm_on(a, b, c0, o, MathMode::bf16, gpu());
      EXPECT_LT(max_relative_error(gpu16, cpu16), kBf16GemmOrder) << "bf16 vs CPU bf16";
      EXPECT_GT(max_relative_error(gpu16, cpu32), kRoundingShows) << "bf16 vs CPU fp32";
    }
}

// bf16 scratch comes from the caching allocator: after a warm-up call, no cudaMalloc.
TEST_F(GpuPrecision, Bf16GemmAllocatesNothingAfterWarmUp) {
  GRIDNN_NEEDS_REAL_GPU("the caching allocator");
  Tensor a = on_gpu(random_tensor({64, 96}, 4)), b = on_gpu(random_tensor({96, 80}, 5));
  Tensor c = Tensor::empty({64, 80}, DType::f32, gpu());
  ops::GemmOptions o;
  o.math = MathMode::bf16;
  ops::gemm(a, b, c, o);
  synchronize(gpu());
  Allocator& alloc = allocator_for(gpu());
  const uint64_t warm = alloc.stats().system_allocations;
  for (int i = 0; i < 5; ++i) ops::gemm(a, b, c, o);
  synchronize(gpu());
  EXPECT_EQ(alloc.stats().system_allocations, warm);
}

// ---- convolution -----------------------------------------------------------------------

struct ConvResults {
  Tensor y, dx, dw;
};

ConvResults conv_on(const Conv3dCase& k, const ops::Conv3dGeometry& g, MathMode math, const Device& device) {
  Tensor x = random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1).to(device);
  Tensor w = random_tensor({k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}, 2).to(device);
  Tensor bias = random_tensor({k.o}, 3).to(device);
  Tensor dy = random_tensor(ops::conv3d_output_shape(g, k.n), 4).to(device);
  ConvResults r;
  r.y = Tensor::empty(dy.shape(), DType::f32, device);
  r.dx = Tensor::empty(x.shape(), DType::f32, device);
  r.dw = random_tensor(w.shape(), 5).to(device);  // accumulates onto fp32 values
  ops::conv3d_forward(x, w, bias, g, r.y, math);
  ops::conv3d_backward_data(dy, w, g, r.dx, math);
  ops::conv3d_backward_filter(x, dy, g, r.dw, math);
  return r;
}

// The shared geometries (the stem's single input channel among them) and a ResNet block.
std::vector<Conv3dCase> conv_cases() {
  std::vector<Conv3dCase> v = conv3d_cases();
  v.push_back({"resnet_block", 2, 16, 32, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {16, 16, 16}});
  return v;
}

TEST_F(GpuPrecision, Conv3dModesAgainstCpu) {
  for (const Conv3dCase& k : conv_cases()) {
    SCOPED_TRACE(k.name);
    const auto g = ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
    const ConvResults cpu32 = conv_on(k, g, MathMode::fp32, Device::cpu());
    const ConvResults cpu16 = conv_on(k, g, MathMode::bf16, Device::cpu());
    const ConvResults gpu32 = conv_on(k, g, MathMode::fp32, gpu());
    const ConvResults tf32 = conv_on(k, g, MathMode::tf32, gpu());
    const ConvResults gpu16 = conv_on(k, g, MathMode::bf16, gpu());
    const char* names[3] = {"forward", "backward data", "backward filter"};
    const Tensor ConvResults::*fields[3] = {&ConvResults::y, &ConvResults::dx, &ConvResults::dw};
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(names[i]);
      const auto f = fields[i];
      EXPECT_LT(max_relative_error(gpu32.*f, cpu32.*f), kFp32Conv) << "fp32";
      EXPECT_LT(max_relative_error(tf32.*f, cpu32.*f), kTf32VsFp32) << "tf32";
      EXPECT_LT(max_relative_error(gpu16.*f, cpu16.*f), kBf16ConvResult) << "bf16 vs CPU bf16";
      // dw's change hides in the accumulated fp32 values; with no tap reaching the input,
      // no product reaches an output.
      if (i < 2 && !ops::conv3d_reaching_taps(g).none()) {
        EXPECT_GT(max_relative_error(gpu16.*f, cpu32.*f), kRoundingShows) << "bf16 vs CPU fp32";
      }
      EXPECT_EQ((gpu16.*f).dtype(), DType::f32);
    }
  }
}

// Each mode has its own cached plan; repeated calls give the same bits (deterministic
// algorithms in every mode), and fp32 after bf16 is still fp32.
TEST_F(GpuPrecision, Conv3dModesAreDeterministicAndSeparate) {
  const Conv3dCase k = conv_cases().back();
  const auto g = ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
  for (MathMode m : {MathMode::fp32, MathMode::tf32, MathMode::bf16}) {
    SCOPED_TRACE(ops::str(m));
    const ConvResults first = conv_on(k, g, m, gpu()), second = conv_on(k, g, m, gpu());
    EXPECT_TRUE(tensors_equal(first.y, second.y));
    EXPECT_TRUE(tensors_equal(first.dx, second.dx));
    EXPECT_TRUE(tensors_equal(first.dw, second.dw));
  }
  const ConvResults again = conv_on(k, g, MathMode::fp32, gpu());
  const ConvResults cpu32 = conv_on(k, g, MathMode::fp32, Device::cpu());
  EXPECT_LT(max_relative_error(again.y, cpu32.y), kFp32Conv);
}

// ---- layers ----------------------------------------------------------------------------

// The layer in bf16 on the GPU: close to the CPU layer in fp32 (the operands' rounding,
// about 1e-3 of the scale, softmax amplifying it a little for attention: 2e-2), and
// parameters and gradients stay f32.
void expect_layer_close_in_bf16(nn::Module& cpu_layer, nn::Module& gpu_layer, const Shape& in_shape) {
  for (auto& [name, p] : gpu_layer.named_parameters()) {
    p->value = p->value.to(gpu());
    p->grad = p->grad.to(gpu());
  }
  gpu_layer.set_math_mode(MathMode::bf16);
  Tensor x = random_tensor(in_shape, 8);
  Tensor y = cpu_layer.forward(x), gy = gpu_layer.forward(on_gpu(x));
  EXPECT_LT(max_relative_error(gy, y), 2e-2) << "forward";
  EXPECT_GT(max_relative_error(gy, y), 1e-5) << "forward: bf16 should not be fp32";
  Tensor dy = random_tensor(y.shape(), 9);
  Tensor dx = cpu_layer.backward(dy), gdx = gpu_layer.backward(on_gpu(dy));
  EXPECT_LT(max_relative_error(gdx, dx), 2e-2) << "backward";
  const auto params = cpu_layer.named_parameters(), gparams = gpu_layer.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(params[i].first);
    EXPECT_EQ(gparams[i].second->value.dtype(), DType::f32);
    EXPECT_EQ(gparams[i].second->grad.dtype(), DType::f32);
    // key.bias: its gradient is rounding noise around zero (softmax cancels it), no scale.
    if (params[i].first == "key.bias") continue;
    EXPECT_LT(max_relative_error(gparams[i].second->grad, params[i].second->grad), 3e-2);
  }
}

TEST_F(GpuPrecision, Conv3dLayerInBf16) {
  nn::Conv3d cpu_conv(4, 8, 3, 2, 1), gpu_conv(4, 8, 3, 2, 1);
  cpu_conv.initialize(7);
  gpu_conv.initialize(7);
  expect_layer_close_in_bf16(cpu_conv, gpu_conv, {2, 4, 8, 9, 7});
}

TEST_F(GpuPrecision, SelfAttentionLayerInBf16) {
  nn::SelfAttention3d cpu_att(32), gpu_att(32);
  for (nn::SelfAttention3d* l : {&cpu_att, &gpu_att}) {
    l->initialize(7);
    for (auto& [name, p] : l->named_parameters())
      if (name == "gamma") ops::fill(p->value, 0.75);  // nonzero: the attention path counts
  }
  expect_layer_close_in_bf16(cpu_att, gpu_att, {2, 32, 4, 4, 3});
}

}  // namespace
}  // namespace gridnn::test
