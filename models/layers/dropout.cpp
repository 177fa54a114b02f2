// nn::Dropout: the Philox mask of kernels/dropout.h in forward and (recomputed) in backward.
#include "models/layers/dropout.h"

#include <sstream>

#include "core/philox.h"

namespace gridnn::nn {

Dropout::Dropout(float p) : p_(p) {
  require_layer(p >= 0.0f && p <= 1.0f, name(), "p must be in [0, 1]");
  key_.stream = philox_stream_id("dropout.mask");
}

std::string Dropout::name() const {
  std::ostringstream os;
  os << "Dropout(p=" << p_ << ")";
  return os.str();
}

void Dropout::set_key(uint64_t seed, const std::string& name) {
  key_.seed = seed;
  key_.stream = philox_stream_id(name.c_str());
}

void Dropout::reset_parameters(uint64_t seed, const std::string& prefix) { set_key(seed, prefix + "mask"); }

ops::DropoutKey Dropout::key_for(const Shape& shape) const {
  ops::DropoutKey k = key_;
  const int64_t per_sample = shape.rank() == 0 || shape[0] == 0 ? 0 : shape.numel() / shape[0];
  k.offset = first_sample_ * per_sample;
  return k;
}

Tensor Dropout::forward(const Tensor& x) {
  require_layer(x.defined(), name(), "input is undefined");
  input_shape_ = x.shape();
  has_forward_ = true;
  forward_active_ = active();
  if (!forward_active_) return x;
  forward_key_ = key_for(x.shape());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::dropout_forward(x, p_, forward_key_, y);
  return y;
}

Tensor Dropout::do_backward(const Tensor& dy) {
  require_layer(has_forward_, name(), "backward called before forward");
  require_layer(dy.shape() == input_shape_, name(),
                "dy " + dy.str() + " does not match the input " + input_shape_.str() + " of the last forward");
  if (!forward_active_) return dy;
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::dropout_backward(dy, p_, forward_key_, dx);
  return dx;
}

}  // namespace gridnn::nn
