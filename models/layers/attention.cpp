// nn::SelfAttention3d and its 1x1x1 convolutions: batched GEMMs (kernels/gemm.h) and the
// softmax kernels (kernels/softmax.h); forward and backward side by side.
#include "models/layers/attention.h"

#include <algorithm>
#include <cmath>

#include "core/profile.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace gridnn::nn {

void scale_by_tensor(const Tensor& scalar, const Tensor& in, Tensor& out, float beta) {
  const int64_t n = in.size(in.rank() - 1), rows = in.numel() / n;
  Tensor o = out.reshape({rows, 1, n});
  ops::gemm_batched(scalar.reshape({1, 1}), in.reshape({rows, 1, n}), o, ops::gemm_options(false, false, beta));
}

// ---- PointwiseConv3d -------------------------------------------------------------------

PointwiseConv3d::PointwiseConv3d(int64_t in_channels, int64_t out_channels, Device device)
    : Module("PointwiseConv3d"), in_(in_channels), out_(out_channels) {
  require_layer(in_ > 0 && out_ > 0, "PointwiseConv3d",
                "channels must be > 0, got " + std::to_string(in_) + " -> " + std::to_string(out_));
  weight_ = &register_parameter("weight", Tensor::zeros({out_, in_, 1, 1, 1}, DType::f32, device));
  bias_ = &register_parameter("bias", Tensor::zeros({out_}, DType::f32, device));
}

std::string PointwiseConv3d::label() const {
  return "PointwiseConv3d(" + std::to_string(in_) + " -> " + std::to_string(out_) + ")";
}

Tensor PointwiseConv3d::weight_matrix() const { return weight_->value.reshape({out_, in_}); }

void PointwiseConv3d::reset_parameters(uint64_t seed, const std::string& prefix) {
  const float bound = 1.0f / std::sqrt(float(in_));  // kaiming_uniform(a = sqrt(5)), fan_in = in
  ops::uniform_(weight_->value, -bound, bound, parameter_key(seed, prefix, "weight", *weight_));
  ops::uniform_(bias_->value, -bound, bound, parameter_key(seed, prefix, "bias", *bias_));
}

Tensor PointwiseConv3d::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 5 && x.size(1) == in_, label(),
                "expects input [B, " + std::to_string(in_) + ", D, H, W], got " +
                    (x.defined() ? x.str() : std::string("undefined")));
  if (!NoBackwardScope::active()) input_ = x;  // kept for backward
  const int64_t b = x.size(0), n = x.size(2) * x.size(3) * x.size(4);
  Tensor y = Tensor::empty({b, out_, n}, x.dtype(), x.device());
  if (y.numel() > 0) {
    ops::gemm_batched(weight_matrix(), x.reshape({b, in_, n}), y,
                      ops::gemm_options(false, false, 0.0f, math_mode()));  // y_b = W x_b
    Tensor ones = Tensor::empty({1, n}, x.dtype(), x.device());
    ops::fill(ones, 1.0);
    ops::gemm_batched(bias_->value.reshape({out_, 1}), ones, y, ops::gemm_options(false, false, 1.0f));  // + b 1^T
  }
  return y.reshape({b, out_, x.size(2), x.size(3), x.size(4)});
}

Tensor PointwiseConv3d::do_backward(const Tensor& dy) {
  require_layer(input_.defined(), label(), "backward called before forward");
  const Shape expected{input_.size(0), out_, input_.size(2), input_.size(3), input_.size(4)};
  require_layer(dy.shape() == expected, label(),
                "dy " + dy.str() + " does not match the output " + expected.str() + " of the last forward");
  const int64_t b = input_.size(0), n = input_.size(2) * input_.size(3) * input_.size(4);
  Tensor dx = Tensor::empty(input_.shape(), dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  Tensor dym = dy.reshape({b, out_, n}), xm = input_.reshape({b, in_, n});
  Tensor dxm = dx.reshape({b, in_, n});
  ops::gemm_batched(weight_matrix(), dym, dxm, ops::gemm_options(true, false, 0.0f, math_mode()));  // dx_b = W^T dy_b
  Tensor dw = weight_->grad.reshape({out_, in_});
  for (int64_t s = 0; s < b; ++s)  // dW += dy_b x_b^T, sample by sample (a fixed order)
    ops::gemm(dym.narrow(s, 1).reshape({out_, n}), xm.narrow(s, 1).reshape({in_, n}), dw,
              ops::gemm_options(false, true, 1.0f, math_mode()));
  ops::axpy(1.0f, ops::sum(ops::sum(dym, 2), 0), bias_->grad);  // db += sum over samples and positions
  input_ = Tensor();                                            // used: freed now, not at the next forward
  return dx;
}

// ---- the attention core ----------------------------------------------------------------

Tensor attention_forward(const Tensor& x, Tensor q, Tensor k, Tensor v, const Parameter& gamma, ops::MathMode m,
                         AttentionCore& core) {
  const int64_t b = q.size(0), c = v.size(1), nq = q.size(2), n = k.size(2);
  core.q = std::move(q);
  core.k = std::move(k);
  core.v = std::move(v);
  core.attention = Tensor::empty({b, nq, n}, x.dtype(), x.device());
  core.o = Tensor::empty({b, c, nq}, x.dtype(), x.device());
  Tensor y = x.clone();
  if (x.numel() == 0) return y;
  ops::gemm_batched(core.q, core.k, core.attention, ops::gemm_options(true, false, 0.0f, m));  // S = Q^T K
  ops::softmax_forward(core.attention, core.attention);  // A = softmax over keys, in place
  ops::gemm_batched(core.v, core.attention, core.o, ops::gemm_options(false, true, 0.0f, m));  // O = V A^T
  scale_by_tensor(gamma.value, core.o, y, 1.0f);                                               // y = x + gamma O
  return y;
}

AttentionGradients attention_backward(const Tensor& dy, Parameter& gamma, ops::MathMode m, const AttentionCore& core) {
  const int64_t b = core.q.size(0), c8 = core.q.size(1), nq = core.q.size(2);
  const int64_t c = core.v.size(1), n = core.k.size(2);
  const Tensor dym = dy.reshape({b, c, nq});

  // y = gamma O + x: dgamma += sum(dy * O), dO = gamma dy.
  Tensor prod = Tensor::empty(dym.shape(), dy.dtype(), dy.device());
  ops::mul(dym, core.o, prod);
  ops::axpy(1.0f, ops::sum_all(prod), gamma.grad);
  Tensor d_o = Tensor::empty(dym.shape(), dy.dtype(), dy.device());
  scale_by_tensor(gamma.value, dym, d_o, 0.0f);

  // O = V A^T: dV = dO A, dA = dO^T V.
  AttentionGradients g;
  g.dv = Tensor::empty({b, c, n}, dy.dtype(), dy.device());
  ops::gemm_batched(d_o, core.attention, g.dv, ops::gemm_options(false, false, 0.0f, m));
  Tensor ds = Tensor::empty({b, nq, n}, dy.dtype(), dy.device());
  ops::gemm_batched(d_o, core.v, ds, ops::gemm_options(true, false, 0.0f, m));
  // A = softmax(S) by rows: dS = A * (dA - rowsum(dA * A)), in dA's place.
  ops::softmax_backward(core.attention, ds, ds);
  // S = Q^T K: dQ = K dS^T, dK = Q dS.
  g.dq = Tensor::empty({b, c8, nq}, dy.dtype(), dy.device());
  ops::gemm_batched(core.k, ds, g.dq, ops::gemm_options(false, true, 0.0f, m));
  g.dk = Tensor::empty({b, c8, n}, dy.dtype(), dy.device());
  ops::gemm_batched(core.q, ds, g.dk, ops::gemm_options(false, false, 0.0f, m));
  return g;
}

double attention_macs(int64_t channels, int64_t queries, int64_t positions, int64_t projected) {
  const int64_t key_channels = channels / 8;  // C/8, as the layer's query and key projections
  const double c = double(channels), c8 = double(key_channels);
  return double(projected) * (2 * c * c8 + c * c) + double(queries) * double(positions) * (c8 + c);
}

// ---- SelfAttention3d -------------------------------------------------------------------

plan::LayerMemory attention_memory(const std::string& name, int64_t batch, int64_t channels, int64_t queries,
                                   int64_t positions, ops::MathMode math, const Device& device) {
  const int64_t b = batch, c = channels, c8 = c / 8, nq = queries, n = positions;
  const int64_t x = activation_bytes({b, c, nq}), scores = activation_bytes({b, nq, n});
  const int64_t q = activation_bytes({b, c8, nq}), k = activation_bytes({b, c8, n}), v = activation_bytes({b, c, n});
  plan::LayerMemory m;
  m.layer = name;
  m.output = m.input_grad = x;
  m.keeps_input = true;
  m.kept = q + k + v + scores + x;                // Q; K and V; A; O
  m.forward_scratch = activation_bytes({1, nq});  // the bias's ones row
  // attention_backward holds dy*O, dO, dV, dS, dQ and dK at once (before dx exists); then dV,
  // dQ, dK, dx and one projection's input gradient.
  const int64_t grads = v + q + k;  // dV, dQ, dK
  m.backward_scratch = std::max(2 * x + scores + grads - x, grads + x);
  const Shape largest = scores >= v ? Shape{b, nq, n} : Shape{b, c, n};
  const int64_t copies = rounded_copies_bytes(math, device, {largest, largest, {c, c}});
  m.forward_scratch += copies;
  m.backward_scratch += copies;
  return m;
}

SelfAttention3d::SelfAttention3d(int64_t channels, Device device) : Module("SelfAttention3d"), channels_(channels) {
  require_layer(channels >= 8 && channels % 8 == 0, "SelfAttention3d(" + std::to_string(channels) + ")",
                "channels must be a positive multiple of 8 (queries and keys have channels / 8), got " +
                    std::to_string(channels));
  gamma_ = &register_parameter("gamma", Tensor::zeros({1}, DType::f32, device));
  query_ = &register_module("query", std::make_unique<PointwiseConv3d>(channels, channels / 8, device));
  key_ = &register_module("key", std::make_unique<PointwiseConv3d>(channels, channels / 8, device));
  value_ = &register_module("value", std::make_unique<PointwiseConv3d>(channels, channels, device));
}

std::string SelfAttention3d::label() const { return "SelfAttention3d(" + std::to_string(channels_) + ")"; }

void SelfAttention3d::reset_parameters(uint64_t, const std::string&) { ops::fill(gamma_->value, 0.0); }

Tensor SelfAttention3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::attention, name(), ProfilePass::forward);
  require_layer(x.defined() && x.rank() == 5 && x.size(1) == channels_, label(),
                "expects input [B, " + std::to_string(channels_) + ", D, H, W], got " +
                    (x.defined() ? x.str() : std::string("undefined")) + "; check the channel count");
  require_layer(x.device() == gamma_->value.device(), label(),
                "input " + x.str() + " is not on the parameters' device " + gamma_->value.str());
  const int64_t b = x.size(0), c = channels_, c8 = channels_ / 8;
  const int64_t n = x.size(2) * x.size(3) * x.size(4);
  input_shape_ = x.shape();
  Tensor q = query_->forward(x).reshape({b, c8, n});
  Tensor k = key_->forward(x).reshape({b, c8, n});
  Tensor v = value_->forward(x).reshape({b, c, n});
  Tensor y = attention_forward(x, std::move(q), std::move(k), std::move(v), *gamma_, math_mode(), core_);
  if (NoBackwardScope::active()) core_ = AttentionCore();
  return y;
}

Tensor SelfAttention3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::attention, name(), ProfilePass::backward);
  require_layer(core_.attention.defined(), label(), "backward called before forward");
  require_layer(dy.shape() == input_shape_, label(),
                "dy " + dy.str() + " does not match the output " + input_shape_.str() + " of the last forward");
  if (dy.numel() == 0) return Tensor::zeros(input_shape_, dy.dtype(), dy.device());
  const AttentionGradients g = attention_backward(dy, *gamma_, math_mode(), core_);
  // dx = dy + Wq^T dQ + Wk^T dK + Wv^T dV (the convolutions add their weight gradients).
  const Shape& s = input_shape_;
  const int64_t b = s[0], c = channels_, c8 = channels_ / 8;
  Tensor dx = Tensor::empty(s, dy.dtype(), dy.device());
  ops::add(dy, query_->backward(g.dq.reshape({b, c8, s[2], s[3], s[4]})), dx);
  ops::add(dx, key_->backward(g.dk.reshape({b, c8, s[2], s[3], s[4]})), dx);
  ops::add(dx, value_->backward(g.dv.reshape({b, c, s[2], s[3], s[4]})), dx);
  core_ = AttentionCore();  // used: freed now, not at the next forward
  return dx;
}

Shape SelfAttention3d::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5 && in[1] == channels_, name(), "cannot run on an input " + in.str());
  const int64_t c = channels_, c8 = c / 8, n = in[2] * in[3] * in[4];
  plan::LayerShape l;
  l.name = name();
  l.kind = plan::LayerKind::attention;
  l.in_channels = l.out_channels = c;
  l.in_size = l.out_size = {in[2], in[3], in[4]};
  l.weights = 2 * (c * c8 + c8) + c * c + c + 1;
  l.forward_flops = 2.0 * attention_macs(c, n, n, n);
  l.samples = in[0];
  step.layers.push_back(l);
  step.memory.push_back(attention_memory(name(), in[0], c, n, n, math_mode(), gamma_->value.device()));
  return in;
}

}  // namespace gridnn::nn
