// kernels/conv3d.h: forward with and without bias, backward data (overwrites), backward
// filter and bias (accumulate) on every geometry of test/support/conv3d_cases.h and a
// ResNet-sized block; the forward's backward (dx, dw, db through the backward ops) against
// central differences; the CPU's slab loop at one output depth plane per slab; the tf32 and
// bf16 math modes against a reference on operands rounded as kernels/math_mode.h rounds
// them; and the nn::Conv3d layer, its backward against the loops too. References:
// test/ops/reference_conv_pool_norm.h, at the tolerance of the layer's test. cuDNN sums in
// its own order (and may pick FFT or Winograd algorithms that round in their transforms), so
// the backends agree within a tolerance.
#include <cmath>

#include "kernels/conv3d.h"
#include "kernels/elementwise.h"
#include "models/layers/conv3d.h"
#include "test/ops/harness.h"
#include "test/ops/layer_case.h"
#include "test/ops/reference_conv_pool_norm.h"
#include "test/support/conv3d_cases.h"

namespace gridnn::test {
namespace {

using ops::MathMode;

// fp32: sums of up to a few thousand products on both sides (test_conv3d's tolerance, and
// the former GPU test's against the CPU).
constexpr Tolerance kTol{1e-4, 1e-4};

// How a case runs the op: its math mode and, on the CPU, its implementation (oneDNN where
// it takes the geometry, the default; or vol2col + GEMM), the latter optionally at the
// smallest column budget, so that the slab loop (vol2col of a range of output depth planes,
// strided GEMMs, col2vol restricted to the planes a slab reads) runs one plane at a time.
struct Variant {
  MathMode math = MathMode::fp32;
  bool vol2col = false;
  bool one_plane_per_slab = false;
  std::string name() const {
    return (math == MathMode::fp32 ? std::string() : std::string(" ") + ops::str(math)) + (one_plane_per_slab
                                                                                               ? " one plane per slab"
                                                                                           : vol2col ? " vol2col"
                                                                                                     : "");
  }
};

// Sets the CPU's convolution implementation and column budget for the life of a run (they
// change nothing on the GPU).
class CpuPath {
 public:
  explicit CpuPath(const Variant& v)
      : previous_conv_(ops::set_cpu_conv(v.vol2col || v.one_plane_per_slab ? ops::CpuConv::vol2col : ops::cpu_conv())),
        one_plane_(v.one_plane_per_slab) {
    if (one_plane_) previous_budget_ = kernels::cpu::conv3d_set_column_budget(1);
  }
  ~CpuPath() {
    if (one_plane_) kernels::cpu::conv3d_set_column_budget(previous_budget_);
    ops::set_cpu_conv(previous_conv_);
  }
  CpuPath(const CpuPath&) = delete;
  CpuPath& operator=(const CpuPath&) = delete;

 private:
  ops::CpuConv previous_conv_;
  bool one_plane_;
  int64_t previous_budget_ = 0;
};

// The ResNet-sized block the former GPU test added to the shared geometries.
const Conv3dCase kResnetBlock{"resnet_block", 2, 16, 32, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {16, 16, 16}};
// Kernels whose reaching taps (ops::conv3d_reaching_taps) the CUDA backend widens to keep the
// output size under cuDNN's padding on both sides (ops::conv3d_symmetric_taps): in depth the
// first of 3 taps reaches, 2 run; in width 1 of 2. One input channel: the stem's geometry and
// that one, which the CUDA backend may run by its one-channel backward filter kernel.
const Conv3dCase kWidenedTaps{"taps_widened_for_cudnn", 2, 2, 3, {3, 3, 2}, {3, 1, 3}, {3, 1, 2}, {1, 3, 2}};
const Conv3dCase kOneChannelStem{"one_channel_stem", 2, 1, 6, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {9, 10, 11}};
const Conv3dCase kOneChannelWidened{"one_channel_taps_widened", 2, 1, 5, {3, 3, 2}, {3, 1, 3}, {3, 1, 2}, {1, 3, 2}};

// Central differences over ten thousand outputs per loss would take seconds and lose the
// gradient in fp32 rounding: geometries with more outputs than kLargeOutputs run without a
// backward (large_enough_for_threads, resnet_block, channels_20_to_13; the others have at
// most ~1100).
constexpr int64_t kLargeOutputs = 4096;
bool large(const Conv3dCase& k) { return k.n * k.o * geometry_of(k).out_volume() > kLargeOutputs; }
Shape x_shape(const Conv3dCase& k) { return {k.n, k.c, k.in[0], k.in[1], k.in[2]}; }
Shape w_shape(const Conv3dCase& k) { return {k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}; }

// Against the CPU. tf32: the tensor cores may truncate operands that the CPU rounds to
// nearest (2^-11 of a product either way; gemm's tf32 tolerance); bf16: cuDNN writes its
// result as bf16 (relative 2^-9) before widening it, the CPU does not (4e-3 as the GPU
// precision test allows), the fp32 bias added after it.
Tolerance backend_tolerance(MathMode math) {
  if (math == MathMode::tf32) return {2e-2, 1e-2};
  if (math == MathMode::bf16) return {2e-2, 4e-3};
  return kTol;
}

// A CPU copy of `t` with every value rounded as an operand in `math` (kernels/math_mode.h).
Tensor rounded(const Tensor& t, MathMode math) {
  if (math == MathMode::fp32) return t;
  Tensor r = t.clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = ops::round_operand(p[i], math);
  return r;
}

Tensor nan_filled(const Shape& shape, const Device& device) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  ops::fill(t, std::nan(""));  // the op overwrites it and never reads it
  return t;
}

Doubles plus(Doubles a, const Doubles& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

OpCase conv_case(const std::string& op, const Conv3dCase& k, const std::string& what, const Variant& v,
                 ops::ConvPass pass) {
  OpCase c;
  c.op = op;
  c.params = std::string(k.name) + what + v.name();
  c.ref_tol = kTol;
  c.backend_tol = backend_tolerance(v.math);
  c.implementation = [=] {
    CpuPath path(v);
    return ops::conv3d_cpu_implementation(geometry_of(k), k.n, pass);
  };
  return c;
}

// Inputs x, w and (with bias) bias; output y. Its backward: dx, dw, db by the backward ops.
OpCase forward_case(const Conv3dCase& k, bool bias, const Variant& v = {}) {
  OpCase c = conv_case("conv3d_forward", k, bias ? " bias" : " no bias", v, ops::ConvPass::forward);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    Tensors in{case_input(key, 0, x_shape(k)), case_input(key, 1, w_shape(k))};
    if (bias) in.push_back(case_input(key, 2, {k.o}));
    return in;
  };
  c.run = [=](const Tensors& in) {
    CpuPath path(v);
    const ops::Conv3dGeometry g = geometry_of(k);
    Tensor y = nan_filled(ops::conv3d_output_shape(g, k.n), in[0].device());
    ops::conv3d_forward(in[0], in[1], bias ? in[2] : Tensor(), g, y, v.math);
    return Tensors{y};
  };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{reference_conv3d_forward(rounded(in[0], v.math), rounded(in[1], v.math),
                                                         bias ? in[2] : Tensor(), geometry_of(k))};
  };
  // A reduced math mode rounds x and w: central differences would see its steps.
  if (v.math == MathMode::fp32 && !large(k)) {
    c.backward = [=](const Tensors& in, const Tensor& dy) {
      CpuPath path(v);
      const ops::Conv3dGeometry g = geometry_of(k);
      const Device d = in[0].device();
      Tensor dx = nan_filled(in[0].shape(), d);
      Tensor dw = Tensor::zeros(in[1].shape(), DType::f32, d);
      ops::conv3d_backward_data(dy, in[1], g, dx);
      ops::conv3d_backward_filter(in[0], dy, g, dw);
      Tensors grads{dx, dw};
      if (bias) {
        Tensor db = Tensor::zeros({k.o}, DType::f32, d);
        ops::conv3d_backward_bias(dy, db);
        grads.push_back(db);
      }
      return grads;
    };
    c.grad_inputs = bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
  }
  return c;
}

// Inputs dy, w; output dx (overwritten).
OpCase backward_data_case(const Conv3dCase& k, const Variant& v = {}) {
  OpCase c = conv_case("conv3d_backward_data", k, "", v, ops::ConvPass::backward_data);
  const std::string key = c.op + c.params;
  const Shape y_shape = ops::conv3d_output_shape(geometry_of(k), k.n);
  c.make_inputs = [=] { return Tensors{case_input(key, 0, y_shape), case_input(key, 1, w_shape(k))}; };
  c.run = [=](const Tensors& in) {
    CpuPath path(v);
    Tensor dx = nan_filled(x_shape(k), in[0].device());
    ops::conv3d_backward_data(in[0], in[1], geometry_of(k), dx, v.math);
    return Tensors{dx};
  };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{
        reference_conv3d_backward_data(rounded(in[0], v.math), rounded(in[1], v.math), geometry_of(k))};
  };
  return c;
}

// Inputs x, dy and dw0; output dw0 + dL/dw (accumulated). In a reduced math mode dw0 is
// zero: cuDNN's bf16 result is rounded before it is added, which a large dw0 would hide.
OpCase backward_filter_case(const Conv3dCase& k, const Variant& v = {}) {
  OpCase c = conv_case("conv3d_backward_filter", k, "", v, ops::ConvPass::backward_filter);
  const std::string key = c.op + c.params;
  const Shape y_shape = ops::conv3d_output_shape(geometry_of(k), k.n);
  c.make_inputs = [=] {
    Tensor dw0 = v.math == MathMode::fp32 ? case_input(key, 2, w_shape(k)) : Tensor::zeros(w_shape(k));
    return Tensors{case_input(key, 0, x_shape(k)), case_input(key, 1, y_shape), dw0};
  };
  c.run = [=](const Tensors& in) {
    CpuPath path(v);
    Tensor dw = in[2].clone();
    ops::conv3d_backward_filter(in[0], in[1], geometry_of(k), dw, v.math);
    return Tensors{dw};
  };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{
        plus(reference_conv3d_backward_filter(rounded(in[0], v.math), rounded(in[1], v.math), geometry_of(k)),
             values(in[2]))};
  };
  return c;
}

// Inputs dy, db0; output db0 + the sum of dy over N, D, H, W (accumulated; fp32 in every
// math mode).
OpCase backward_bias_case(const Conv3dCase& k) {
  OpCase c = conv_case("conv3d_backward_bias", k, "", {}, ops::ConvPass::forward);
  c.implementation = nullptr;
  const std::string key = c.op + c.params;
  const Shape y_shape = ops::conv3d_output_shape(geometry_of(k), k.n);
  c.make_inputs = [=] { return Tensors{case_input(key, 0, y_shape), case_input(key, 1, {k.o})}; };
  c.run = [](const Tensors& in) {
    Tensor db = in[1].clone();
    ops::conv3d_backward_bias(in[0], db);
    return Tensors{db};
  };
  c.reference = [](const Tensors& in) {
    return std::vector<Doubles>{plus(reference_conv3d_backward_bias(in[0]), values(in[1]))};
  };
  return c;
}

// nn::Conv3d: inputs x, weight (and bias); the reference is the forward's.
OpCase layer(const std::string& what, int64_t c_in, int64_t c_out, ops::Triple kernel, ops::Triple stride,
             ops::Triple padding, bool bias, const Shape& x) {
  OpCase c = layer_case(
      "Conv3d", what + (bias ? "" : " no bias"),
      [=] { return std::make_unique<nn::Conv3d>(c_in, c_out, kernel, stride, padding, bias); }, x);
  c.reference = [=](const Tensors& in) {
    const auto g = ops::conv3d_geometry("test", c_in, c_out, kernel, stride, padding, {x[2], x[3], x[4]});
    return std::vector<Doubles>{reference_conv3d_forward(in[0], in[1], bias ? in[2] : Tensor(), g)};
  };
  c.ref_tol = kTol;
  c.backend_tol = kTol;
  return c;
}

OpCase layer(const Conv3dCase& k, bool bias = true) {
  return layer(k.name, k.c, k.o, k.kernel, k.stride, k.padding, bias, x_shape(k));
}

// Inputs x, weight, bias and dy; outputs dx, dL/dweight and dL/dbias of a fresh layer.
OpCase layer_backward(const Conv3dCase& k) {
  const ops::Conv3dGeometry g = geometry_of(k);
  OpCase c = layer_backward_case(layer(k), ops::conv3d_output_shape(g, k.n));
  c.reference = [g](const Tensors& in) {
    return std::vector<Doubles>{reference_conv3d_backward_data(in[3], in[1], g),
                                reference_conv3d_backward_filter(in[0], in[3], g),
                                reference_conv3d_backward_bias(in[3])};
  };
  return c;
}

bool named(const Conv3dCase& k, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (std::string(k.name) == n) return true;
  return false;
}

}  // namespace

void add_conv3d_cases(OpCases& cases) {
  std::vector<Conv3dCase> geometries = conv3d_cases();
  geometries.push_back(kResnetBlock);
  for (const Conv3dCase& k : {kWidenedTaps, kOneChannelStem, kOneChannelWidened}) geometries.push_back(k);
  for (const Conv3dCase& k : geometries) {
    cases.push_back(forward_case(k, true));
    cases.push_back(forward_case(k, false));
    cases.push_back(backward_data_case(k));
    cases.push_back(backward_filter_case(k));
    cases.push_back(backward_bias_case(k));
  }

  // vol2col + GEMM, the CPU's other implementation, on every geometry.
  const Variant vol2col{MathMode::fp32, true, false};
  for (const Conv3dCase& k : geometries) {
    cases.push_back(forward_case(k, true, vol2col));
    cases.push_back(backward_data_case(k, vol2col));
    cases.push_back(backward_filter_case(k, vol2col));
  }

  // Its slab loop one output depth plane at a time, on every geometry; central differences
  // on those with several planes and taps reaching into the padding (strides, a batch, a
  // non-cubic kernel), the backward ops' slabs being checked against the loops on all.
  const Variant slab{MathMode::fp32, true, true};
  for (const Conv3dCase& k : conv3d_cases()) {
    for (bool bias : {true, false}) {
      OpCase forward = forward_case(k, bias, slab);
      if (!bias || !named(k, {"3x3x3_pad1", "7x7x7_stride2_pad3_batch", "noncubic", "stride2_odd"})) {
        forward.backward = nullptr;
        forward.grad_inputs.clear();
      }
      cases.push_back(forward);
    }
    cases.push_back(backward_data_case(k, slab));
    cases.push_back(backward_filter_case(k, slab));
  }

  // The math modes: fp32 arithmetic on operands rounded to tf32 or bf16, the bias fp32.
  for (MathMode math : {MathMode::tf32, MathMode::bf16})
    for (const Conv3dCase& k : conv3d_cases()) {
      const Variant v{math, false, false};
      if (named(k, {"3x3x3_pad1", "7x7x7_stride2_pad3", "stride2_odd"})) cases.push_back(forward_case(k, true, v));
      if (named(k, {"3x3x3_pad1"})) {
        cases.push_back(backward_data_case(k, v));
        cases.push_back(backward_filter_case(k, v));
      }
    }

  // The layer: every geometry, one without bias, and the former GPU test's (strides
  // differing per dimension on an odd volume).
  const std::vector<Conv3dCase>& k = conv3d_cases();
  for (const Conv3dCase& geometry : k) cases.push_back(layer(geometry));
  cases.push_back(layer(k[5], false));
  cases.push_back(layer("3x3x3_stride2x1x2_pad1", 2, 3, {3, 3, 3}, {2, 1, 2}, {1, 1, 1}, true, {2, 2, 5, 6, 7}));
  // Its backward against the loops (dx overwritten, dw and db from zero), where the grad mode
  // holds it to central differences only.
  for (const Conv3dCase& geometry : {k[2], k[5]}) cases.push_back(layer_backward(geometry));
}

}  // namespace gridnn::test
