// nn::Linear: forward and backward by GEMMs (kernels/gemm.h), the bias gradient by a
// fixed-order column sum (kernels/reduce.h).
#include "models/layers/linear.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"
#include "kernels/reduce.h"

namespace gridnn::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Device device)
    : Module("Linear"), in_(in_features), out_(out_features) {
  require_layer(in_features > 0 && out_features > 0, "Linear",
                "in_features and out_features must be > 0, got " + std::to_string(in_features) + " and " +
                    std::to_string(out_features));
  weight_ = &register_parameter("weight", Tensor::zeros({out_, in_}, DType::f32, device));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_}, DType::f32, device));
}

std::string Linear::label() const { return "Linear(" + std::to_string(in_) + ", " + std::to_string(out_) + ")"; }

void Linear::reset_parameters(uint64_t seed, const std::string& prefix) {
  // fan_in: the whole layer's input features, also where this one holds a block of them.
  const ParameterLayout& l = weight_->layout;
  const float bound = 1.0f / std::sqrt(float(l.split_over && l.split_dim == 1 ? l.whole : in_));
  ops::uniform_(weight_->value, -bound, bound, parameter_key(seed, prefix, "weight", *weight_));
  if (bias_) ops::uniform_(bias_->value, -bound, bound, parameter_key(seed, prefix, "bias", *bias_));
}

Tensor Linear::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 2 && x.size(1) == in_, label(),
                "expects input [N, " + std::to_string(in_) + "], got " + (x.defined() ? x.str() : "undefined") +
                    "; flatten the input or change in_features");
  require_layer(x.device() == weight_->value.device(), label(),
                "input " + x.str() + " is not on the weight's device " + weight_->value.str());
  if (!NoBackwardScope::active()) input_ = x;  // kept for backward
  const int64_t n = x.size(0);
  Tensor y = Tensor::empty({n, out_}, x.dtype(), x.device());
  ops::GemmOptions xwt;
  xwt.transpose_b = true;
  xwt.math = math_mode();
  ops::gemm(x, weight_->value, y, xwt);  // y = x W^T
  if (bias_ && n > 0) {
    // y += ones[N, 1] b[1, out]: the broadcast as a rank-1 GEMM (exact: one product by 1).
    Tensor ones = Tensor::empty({n, 1}, x.dtype(), x.device());
    ops::fill(ones, 1.0);
    ops::GemmOptions acc;
    acc.beta = 1.0f;
    ops::gemm(ones, bias_->value.reshape({1, out_}), y, acc);
  }
  return y;
}

Shape Linear::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 2 && in[1] == in_, label(), "cannot run on an input " + in.str());
  step.layers.push_back(plan::fc_layer(name(), in_, out_));
  if (!bias_) step.layers.back().weights -= out_;
  plan::LayerMemory m;  // keeps its input for the weight gradient
  m.layer = name();
  m.output = activation_bytes({in[0], out_});
  m.keeps_input = true;
  m.input_grad = activation_bytes(in);
  m.forward_scratch = bias_ ? activation_bytes({in[0], 1}) : 0;  // the ones column
  m.backward_scratch = bias_ ? activation_bytes({out_}) : 0;     // the bias gradient's sum
  const Device d = weight_->value.device();
  m.forward_scratch += rounded_copies_bytes(math_mode(), d, {in, weight_->value.shape()});
  m.backward_scratch += rounded_copies_bytes(math_mode(), d, {in, {in[0], out_}, weight_->value.shape()});
  step.memory.push_back(m);
  return {in[0], out_};
}

Tensor Linear::do_backward(const Tensor& dy) {
  require_layer(input_.defined(), label(), "backward called before forward");
  require_layer(dy.rank() == 2 && dy.size(0) == input_.size(0) && dy.size(1) == out_, label(),
                "dy " + dy.str() + " does not match the output [" + std::to_string(input_.size(0)) + ", " +
                    std::to_string(out_) + "] of the last forward");
  Tensor dx = Tensor::empty(input_.shape(), dy.dtype(), dy.device());
  ops::GemmOptions dxw;
  dxw.math = math_mode();
  ops::gemm(dy, weight_->value, dx, dxw);  // dx = dy W
  ops::GemmOptions dw;
  dw.transpose_a = true;
  dw.beta = 1.0f;
  dw.math = math_mode();
  ops::gemm(dy, input_, weight_->grad, dw);                                    // dW += dy^T x
  if (bias_ && dy.size(0) > 0) ops::axpy(1.0f, ops::sum(dy, 0), bias_->grad);  // db += sum over the batch
  input_ = Tensor();  // used: freed now, not at the next forward
  return dx;
}

}  // namespace gridnn::nn
