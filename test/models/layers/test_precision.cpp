// Precision modes (kernels/math_mode.h) on the CPU, where tf32 and bf16 are emulated by
// rounding the operands: names and rounding; GEMM and the three convolutions in bf16 equal
// the fp32 op on operands rounded by the cast kernel (an independent path to the same
// values), and differ from the unrounded fp32 result (the rounding happens); parameters and
// gradients stay fp32; Module::set_math_mode reaches every descendant; the layers use it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "kernels/conv3d.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "models/layers/attention.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "test/support/conv3d_cases.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn::test {
namespace {

using ops::MathMode;

// Same values through the same fp32 code (only the rounding pass differs): equal up to
// nothing at all in practice; a little room for OpenBLAS kernels that depend on alignment.
constexpr Tolerance kSame{1e-6, 1e-6};
// Rounding the operands to bf16 (relative 2^-9 each) moves these sums by about 1e-3 of
// their scale; anything under 1e-4 means the operands were not rounded.
constexpr double kRoundingShows = 1e-4;

Tensor bf16_rounded(const Tensor& t) { return ops::cast(ops::cast(t, DType::bf16), DType::f32); }

TEST(MathMode, NamesRoundTripAndUnknownNamesSayWhatToUse) {
  for (MathMode m : {MathMode::fp32, MathMode::tf32, MathMode::bf16}) EXPECT_EQ(parse_enum<MathMode>(ops::str(m)), m);
  EXPECT_STREQ(ops::str(MathMode::bf16), "bf16");
  const std::string msg = error_message([] { parse_enum<MathMode>("fp16"); });
  EXPECT_NE(msg.find("unknown math mode \"fp16\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tf32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  EXPECT_NE(error_message([] { parse_enum<MathMode>("BF16"); }), "(no error)");
}

TEST(MathMode, RoundOperandRoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties to the
  // even 1), 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (ties to the even 1 + 2^-6).
  EXPECT_EQ(ops::round_operand(1.0f + std::ldexp(1.0f, -8), MathMode::bf16), 1.0f);
  EXPECT_EQ(ops::round_operand(1.0f + 3 * std::ldexp(1.0f, -8), MathMode::bf16), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(ops::round_operand(-1.0f - 5 * std::ldexp(1.0f, -9), MathMode::bf16), -1.0f - std::ldexp(1.0f, -7));
  // tf32 keeps 10.
  EXPECT_EQ(ops::round_operand(1.0f + std::ldexp(1.0f, -11), MathMode::tf32), 1.0f);
  EXPECT_EQ(ops::round_operand(1.0f + 3 * std::ldexp(1.0f, -11), MathMode::tf32), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(ops::round_operand(1.0f + std::ldexp(1.0f, -10), MathMode::tf32), 1.0f + std::ldexp(1.0f, -10));
  const float odd = 1.0f + std::ldexp(1.0f, -23);
  EXPECT_EQ(ops::round_operand(odd, MathMode::fp32), odd);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ops::round_operand(inf, MathMode::tf32), inf);
  EXPECT_TRUE(std::isnan(ops::round_operand(std::nanf(""), MathMode::tf32)));
  EXPECT_TRUE(std::isnan(ops::round_operand(std::nanf(""), MathMode::bf16)));
}

// ---- GEMM -------------------------------------------------------------------------------

TEST(PrecisionGemm, Bf16IsFp32OnRoundedOperands) {
  const int64_t m = 17, n = 23, k = 96;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool batched : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb << " batched " << batched);
        const Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n};
        Tensor a = random_tensor(batched ? Shape{3, sa[0], sa[1]} : sa, 1);
        Tensor b = random_tensor(sb, 2);  // shared by every batch entry when batched
        Tensor c0 = random_tensor(batched ? Shape{3, m, n} : Shape{m, n}, 3);
        ops::GemmOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.alpha = 1.5f;
        o.beta = 0.5f;  // C's old values are not rounded: they are fp32 accumulators
        auto run = [&](const Tensor& x, const Tensor& y, MathMode math) {
          Tensor c = c0.clone();
          o.math = math;
          if (batched)
            ops::gemm_batched(x, y, c, o);
          else
            ops::gemm(x, y, c, o);
          return c;
        };
        const Tensor bf16 = run(a, b, MathMode::bf16);
        EXPECT_TRUE(tensors_close(bf16, run(bf16_rounded(a), bf16_rounded(b), MathMode::fp32), kSame));
        const Tensor fp32 = run(a, b, MathMode::fp32);
        EXPECT_GT(max_relative_error(bf16, fp32), kRoundingShows);
        EXPECT_LT(max_relative_error(bf16, fp32), 1e-2);
        // tf32 (also emulated): between the two.
        const double tf32_error = max_relative_error(run(a, b, MathMode::tf32), fp32);
        EXPECT_GT(tf32_error, 1e-6);
        EXPECT_LT(tf32_error, 2e-3);
      }
}

TEST(PrecisionGemm, SixteenBitTensorsIgnoreTheMode) {
  Tensor a = random_tensor({8, 16}, 4, -1, 1, DType::bf16), b = random_tensor({16, 8}, 5, -1, 1, DType::bf16);
  Tensor c1 = Tensor::empty({8, 8}, DType::bf16), c2 = Tensor::empty({8, 8}, DType::bf16);
  ops::GemmOptions o;
  ops::gemm(a, b, c1, o);
  o.math = MathMode::tf32;
  ops::gemm(a, b, c2, o);
  EXPECT_TRUE(tensors_equal(c1, c2));
}

// ---- convolution -----------------------------------------------------------------------

TEST(PrecisionConv3d, Bf16IsFp32OnRoundedOperands) {
  for (const Conv3dCase& k : conv3d_cases()) {
    SCOPED_TRACE(k.name);
    const auto g = ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
    const Shape y_shape = ops::conv3d_output_shape(g, k.n);
    Tensor x = random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1);
    Tensor w = random_tensor({k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}, 2);
    Tensor bias = random_tensor({k.o}, 3);  // not bf16 values: the bias must stay fp32
    Tensor dy = random_tensor(y_shape, 4);
    Tensor dw0 = random_tensor(w.shape(), 5);  // dw accumulates onto fp32 values
    const Tensor rx = bf16_rounded(x), rw = bf16_rounded(w), rdy = bf16_rounded(dy);

    auto forward = [&](const Tensor& xx, const Tensor& ww, MathMode math) {
      Tensor y = Tensor::empty(y_shape);
      ops::conv3d_forward(xx, ww, bias, g, y, math);
      return y;
    };
    auto backward_data = [&](const Tensor& d, const Tensor& ww, MathMode math) {
      Tensor dx = Tensor::empty(x.shape());
      ops::conv3d_backward_data(d, ww, g, dx, math);
      return dx;
    };
    auto backward_filter = [&](const Tensor& xx, const Tensor& d, MathMode math) {
      Tensor dw = dw0.clone();
      ops::conv3d_backward_filter(xx, d, g, dw, math);
      return dw;
    };
    const Tensor y = forward(x, w, MathMode::bf16);
    const Tensor dx = backward_data(dy, w, MathMode::bf16);
    const Tensor dw = backward_filter(x, dy, MathMode::bf16);
    EXPECT_TRUE(tensors_close(y, forward(rx, rw, MathMode::fp32), kSame)) << "forward";
    EXPECT_TRUE(tensors_close(dx, backward_data(rdy, rw, MathMode::fp32), kSame)) << "backward data";
    EXPECT_TRUE(tensors_close(dw, backward_filter(rx, rdy, MathMode::fp32), kSame)) << "backward filter";
    EXPECT_EQ(dw.dtype(), DType::f32);
    // Against the unrounded operands, where any product reaches an output. (The backward-filter
    // change is measured without dw0, which would hide it in a large sum.)
    if (ops::conv3d_reaching_taps(g).none()) continue;
    EXPECT_GT(max_relative_error(y, forward(x, w, MathMode::fp32)), kRoundingShows) << "forward";
    EXPECT_GT(max_relative_error(dx, backward_data(dy, w, MathMode::fp32)), kRoundingShows) << "backward data";
    dw0 = Tensor::zeros(w.shape());
    EXPECT_GT(max_relative_error(backward_filter(x, dy, MathMode::bf16), backward_filter(x, dy, MathMode::fp32)),
              kRoundingShows)
        << "backward filter";
  }
}

TEST(PrecisionConv3d, DefaultIsFp32) {
  const Conv3dCase& k = conv3d_cases()[2];
  const auto g = ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
  Tensor x = random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1);
  Tensor w = random_tensor({k.o, k.c, 3, 3, 3}, 2);
  Tensor y1 = Tensor::empty(ops::conv3d_output_shape(g, k.n)), y2 = y1.clone();
  ops::conv3d_forward(x, w, Tensor(), g, y1);
  ops::conv3d_forward(x, w, Tensor(), g, y2, MathMode::fp32);
  EXPECT_TRUE(tensors_equal(y1, y2));
}

// ---- modules ---------------------------------------------------------------------------

// Records the mode it runs in.
class Probe : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    seen = math_mode();
    return x;
  }
  MathMode seen = MathMode::fp32;

 private:
  Tensor do_backward(const Tensor& dy) override { return dy; }
};

TEST(PrecisionModule, SetMathModeReachesEveryDescendant) {
  nn::Sequential root;
  auto& inner = root.add(std::make_unique<nn::Sequential>());
  Probe& deep = inner.add(std::make_unique<Probe>());
  Probe& shallow = root.add(std::make_unique<Probe>());
  EXPECT_EQ(root.math_mode(), MathMode::fp32);  // the default
  root.set_math_mode(MathMode::bf16);
  EXPECT_EQ(inner.math_mode(), MathMode::bf16);
  EXPECT_EQ(deep.math_mode(), MathMode::bf16);
  EXPECT_EQ(shallow.math_mode(), MathMode::bf16);
  Probe& late = inner.add(std::make_unique<Probe>());  // added afterwards: inherits
  EXPECT_EQ(late.math_mode(), MathMode::bf16);
  root.forward(Tensor::zeros({1}));
  EXPECT_EQ(deep.seen, MathMode::bf16);
  inner.set_math_mode(MathMode::tf32);  // a subtree only
  EXPECT_EQ(root.math_mode(), MathMode::bf16);
  EXPECT_EQ(shallow.math_mode(), MathMode::bf16);
  EXPECT_EQ(deep.math_mode(), MathMode::tf32);
}

// The layer in bf16 equals the same layer in fp32 with weights and input rounded to bf16
// (the bias and the accumulated gradients stay fp32).
TEST(PrecisionModule, LinearUsesItsMode) {
  nn::Linear layer(24, 10), reference(24, 10);
  layer.initialize(3);
  reference.initialize(3);
  auto& w = reference.named_parameters()[0].second->value;
  w = bf16_rounded(w);
  layer.set_math_mode(MathMode::bf16);
  Tensor x = random_tensor({6, 24}, 7), dy = random_tensor({6, 10}, 8);
  const Tensor y = layer.forward(x), y_ref = reference.forward(bf16_rounded(x));
  EXPECT_TRUE(tensors_close(y, y_ref, kSame));
  const Tensor dx = layer.backward(dy), dx_ref = reference.backward(bf16_rounded(dy));
  EXPECT_TRUE(tensors_close(dx, dx_ref, kSame));
  nn::Parameter& weight = *layer.named_parameters()[0].second;
  EXPECT_EQ(weight.value.dtype(), DType::f32);  // master weights: not rounded in place
  EXPECT_TRUE(tensors_close(weight.grad, reference.named_parameters()[0].second->grad, kSame));
  nn::Linear fp32(24, 10);
  fp32.initialize(3);
  EXPECT_GT(max_relative_error(y, fp32.forward(x)), kRoundingShows);
  fp32.backward(dy);  // the bias gradient is the fp32 sum of the unrounded dy
  EXPECT_TRUE(tensors_equal(layer.named_parameters()[1].second->grad, fp32.named_parameters()[1].second->grad));
}

TEST(PrecisionModule, Conv3dUsesItsMode) {
  nn::Conv3d layer(2, 3, 3, 1, 1), fp32(2, 3, 3, 1, 1);
  layer.initialize(4);
  fp32.initialize(4);
  layer.set_math_mode(MathMode::bf16);
  Tensor x = random_tensor({2, 2, 4, 5, 3}, 9);
  const Tensor y = layer.forward(x);
  Tensor y_ref = Tensor::empty(y.shape());
  ops::conv3d_forward(x, layer.weight().value, layer.bias()->value, layer.geometry(), y_ref, MathMode::bf16);
  EXPECT_TRUE(tensors_equal(y, y_ref));
  const Tensor y32 = fp32.forward(x);
  EXPECT_GT(max_relative_error(y, y32), kRoundingShows);
  EXPECT_LT(max_relative_error(y, y32), 1e-2);
  const Tensor dy = random_tensor(y.shape(), 10);
  const Tensor dx = layer.backward(dy), dx32 = fp32.backward(dy);
  EXPECT_GT(max_relative_error(dx, dx32), kRoundingShows);
  EXPECT_LT(max_relative_error(dx, dx32), 1e-2);
  EXPECT_LT(max_relative_error(layer.weight().grad, fp32.weight().grad), 1e-2);
  EXPECT_TRUE(tensors_equal(layer.bias()->grad, fp32.bias()->grad));  // the bias gradient is fp32
}

// Attention in bf16 stays close to fp32 (softmax and the residual are fp32) but is not it.
TEST(PrecisionModule, SelfAttentionInBf16IsCloseToFp32) {
  nn::SelfAttention3d layer(16), fp32(16);
  for (nn::SelfAttention3d* l : {&layer, &fp32}) {
    l->initialize(5);
    for (auto& [name, p] : l->named_parameters())
      if (name == "gamma") ops::fill(p->value, 0.75);
  }
  layer.set_math_mode(MathMode::bf16);
  Tensor x = random_tensor({2, 16, 2, 3, 2}, 11), dy = random_tensor({2, 16, 2, 3, 2}, 12);
  Tensor y = layer.forward(x), y32 = fp32.forward(x);
  EXPECT_GT(max_relative_error(y, y32), 1e-5);
  EXPECT_LT(max_relative_error(y, y32), 1e-2);
  Tensor dx = layer.backward(dy), dx32 = fp32.backward(dy);
  EXPECT_LT(max_relative_error(dx, dx32), 2e-2);
  const auto params = layer.named_parameters(), params32 = fp32.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(params[i].first);
    EXPECT_EQ(params[i].second->grad.dtype(), DType::f32);
    // The key bias adds the same q . bk to a whole row of scores, which softmax cancels: its
    // gradient is rounding noise around zero, with no scale to compare against.
    if (params[i].first == "key.bias") continue;
    EXPECT_LT(max_relative_error(params[i].second->grad, params32[i].second->grad), 3e-2);
  }
}

}  // namespace
}  // namespace gridnn::test
