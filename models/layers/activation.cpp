#include "models/layers/activation.h"

#include "core/profile.h"
#include "kernels/elementwise.h"

namespace gridnn::nn {

Tensor ReLU::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::batchnorm_relu, name(), ProfilePass::forward);
  if (!NoBackwardScope::active()) input_ = x;  // kept for backward
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::relu_forward(x, y);
  return y;
}

Tensor ReLU::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::batchnorm_relu, name(), ProfilePass::backward);
  require_layer(input_.defined(), "ReLU", "backward called before forward");
  require_layer(dy.shape() == input_.shape(), "ReLU",
                "dy " + dy.shape().str() + " does not match the input " + input_.shape().str());
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::relu_backward(input_, dy, dx);
  input_ = Tensor();  // used: freed now, not at the next forward
  return dx;
}

Shape ReLU::describe(const Shape& in, plan::RankStep& step) const {
  plan::LayerMemory m;  // keeps its input (the sign of x gates dy)
  m.layer = name();
  m.output = m.input_grad = activation_bytes(in);
  m.keeps_input = true;
  step.memory.push_back(m);
  return in;
}

Tensor Flatten::forward(const Tensor& x) {
  require_layer(x.rank() >= 1, "Flatten", "needs a batch dimension, got " + x.str());
  input_shape_ = x.shape();
  return x.reshape({x.size(0), x.size(0) == 0 ? 0 : x.numel() / x.size(0)});
}

Shape Flatten::describe(const Shape& in, plan::RankStep& /*step*/) const {
  require_layer(in.rank() >= 1, "Flatten", "needs a batch dimension, got " + in.str());
  return {in[0], in[0] == 0 ? 0 : in.numel() / in[0]};
}

Tensor Flatten::do_backward(const Tensor& dy) {
  require_layer(dy.numel() == input_shape_.numel(), "Flatten",
                "dy " + dy.shape().str() + " does not match the input " + input_shape_.str());
  return dy.reshape(input_shape_);
}

Tensor residual_add(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  ops::add(a, b, out);
  return out;
}

}  // namespace gridnn::nn
