// nn::Conv3d: shape checks, PyTorch initialization, and forward/backward on the conv3d ops.
#include "models/layers/conv3d.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "core/profile.h"
#include "kernels/layout.h"
#include "kernels/random.h"

namespace gridnn::nn {

namespace {
std::string triple_str(const Conv3d::Triple& t) {
  return "[" + std::to_string(t[0]) + ", " + std::to_string(t[1]) + ", " + std::to_string(t[2]) + "]";
}
}  // namespace

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, Triple kernel, Triple stride, Triple padding, bool bias)
    : Module("Conv3d"),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding) {
  require_layer(in_channels > 0 && out_channels > 0, "Conv3d",
                "channel counts must be positive, got in " + std::to_string(in_channels) + ", out " +
                    std::to_string(out_channels));
  for (int d = 0; d < 3; ++d)
    require_layer(kernel[size_t(d)] > 0 && stride[size_t(d)] > 0 && padding[size_t(d)] >= 0, "Conv3d",
                  "kernel " + triple_str(kernel) + " and stride " + triple_str(stride) +
                      " must be positive and padding " + triple_str(padding) + " not negative");
  weight_ = &register_parameter("weight", Tensor::zeros({out_channels, in_channels, kernel[0], kernel[1], kernel[2]}));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_channels}));
}

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias)
    : Conv3d(in_channels, out_channels, Triple{kernel, kernel, kernel}, Triple{stride, stride, stride},
             Triple{padding, padding, padding}, bias) {}

void Conv3d::reset_parameters(uint64_t seed, const std::string& prefix) {
  // PyTorch: kaiming_uniform_(a = sqrt(5)) for the weight, which is uniform(+-1/sqrt(fan_in)),
  // and the same bound for the bias.
  const int64_t fan_in = in_channels_ * kernel_[0] * kernel_[1] * kernel_[2];
  const float bound = float(1.0 / std::sqrt(double(fan_in)));
  ops::uniform_(weight_->value, -bound, bound, parameter_key(seed, prefix, "weight", *weight_));
  if (bias_) ops::uniform_(bias_->value, -bound, bound, parameter_key(seed, prefix, "bias", *bias_));
}

ops::Conv3dGeometry Conv3d::geometry_of(const Tensor& x) const {
  require_layer(x.defined() && x.rank() == 5, "Conv3d",
                "input must be 5-D [N, C, D, H, W], got " + (x.defined() ? x.str() : "undefined"));
  return geometry_of(x.shape());
}

ops::Conv3dGeometry Conv3d::geometry_of(const Shape& x) const {
  require_layer(x[1] == in_channels_, "Conv3d",
                "input " + x.str() + " has " + std::to_string(x[1]) + " channels but the layer expects " +
                    std::to_string(in_channels_) + " (weight " + weight_->value.shape().str() + ")");
  // Names the layer in its errors (kernel larger than the padded input, ...).
  return ops::conv3d_geometry("Conv3d (input " + x.str() + ")", in_channels_, out_channels_, kernel_, stride_, padding_,
                              {x[2], x[3], x[4]});
}

Tensor Conv3d::convolve(const Tensor& x, const ops::Conv3dGeometry& g) const {
  Tensor y = Tensor::empty(ops::conv3d_output_shape(g, x.size(0)), x.dtype(), x.device());
  ops::conv3d_forward(x, weight_->value, bias_ ? bias_->value : Tensor(), g, y, math_mode());
  return y;
}

Tensor Conv3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::convolution, name(), ProfilePass::forward);
  geometry_ = geometry_of(x);
  if (!NoBackwardScope::active()) input_ = x;  // kept for backward (the last forward's let go of first)
  return convolve(x, geometry_);
}

Conv3d::Parts Conv3d::parts(int64_t depth, int64_t at, int64_t inner_depth) const {
  // Output plane j reads input planes [j s, j s + k).
  const int64_t k = kernel_[0], s = stride_[0];
  const auto piece = [&](int64_t first, int64_t count) {
    return Piece{first, count, first * s, count > 0 ? (count - 1) * s + k : 0};
  };
  const int64_t out_depth = depth >= k ? (depth - k) / s + 1 : 0;
  const int64_t first = std::min((at + s - 1) / s, out_depth);
  const int64_t last = at + inner_depth - k >= 0 ? (at + inner_depth - k) / s : -1;  // the last inner one
  const int64_t count = std::max<int64_t>(0, std::min(last + 1, out_depth) - first);
  return {piece(first, count), {piece(0, first), piece(first + count, out_depth - first - count)}};
}

Tensor Conv3d::forward_in_parts(const Tensor& inner, int64_t at, int64_t depth, const std::function<Tensor()>& rest) {
  const ProfileScope profile(ProfileKind::convolution, name(), ProfilePass::forward);
  require_layer(padding_[0] == 0, "Conv3d", "forward_in_parts needs depth padding 0");
  if (!NoBackwardScope::active()) input_ = Tensor();  // the last forward's, let go of first
  const Parts p = parts(depth, at, inner.size(2));
  const ops::Conv3dGeometry whole = geometry_of(inner.shape().with(2, depth));
  bool same_kernels = inner.device().is_cpu() && p.inner.out_count > 0;
  const auto implementation = [&](int64_t planes) {
    return ops::conv3d_cpu_implementation(geometry_of(inner.shape().with(2, planes)), inner.size(0),
                                          ops::ConvPass::forward);
  };
  if (same_kernels) {
    const std::string kernel = ops::conv3d_cpu_implementation(whole, inner.size(0), ops::ConvPass::forward);
    for (const Piece& piece : {p.inner, p.edges[0], p.edges[1]})
      if (piece.out_count > 0 && implementation(piece.in_count) != kernel) same_kernels = false;
  }
  Tensor y_inner;
  if (same_kernels)
    y_inner = p.inner.in_first == at && p.inner.in_count == inner.size(2)
                  ? convolve(inner, geometry_of(inner.shape()))
                  : convolve(ops::slice(inner, 2, p.inner.in_first - at, p.inner.in_count),
                             geometry_of(inner.shape().with(2, p.inner.in_count)));  // the copy freed here
  const Tensor x = rest();
  require_layer(x.defined() && x.shape() == inner.shape().with(2, depth), "Conv3d",
                "forward_in_parts: the whole input " + (x.defined() ? x.str() : std::string("undefined")) + " is not " +
                    inner.shape().with(2, depth).str());
  geometry_ = whole;
  if (!NoBackwardScope::active()) input_ = x;
  if (!same_kernels) return convolve(x, geometry_);
  Tensor y = Tensor::empty(ops::conv3d_output_shape(geometry_, x.size(0)), x.dtype(), x.device());
  ops::copy_slices(y_inner, 2, 0, y, p.inner.out_first, p.inner.out_count);
  y_inner = Tensor();
  for (const Piece& edge : p.edges) {  // each from the input planes it reads
    if (edge.out_count == 0) continue;
    const Tensor x_edge = ops::slice(x, 2, edge.in_first, edge.in_count);
    ops::copy_slices(convolve(x_edge, geometry_of(x_edge.shape())), 2, 0, y, edge.out_first, edge.out_count);
  }
  return y;
}

ops::Conv3dCpuMemory Conv3d::cpu_memory(const Shape& in) const {
  return ops::conv3d_cpu_memory(geometry_of(in), in[0], bias_ != nullptr, input_gradient_);
}

Shape Conv3d::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5 && in[1] == in_channels_, name(), "cannot run on an input " + in.str());
  const ops::Conv3dGeometry g =
      ops::conv3d_geometry(name(), in_channels_, out_channels_, kernel_, stride_, padding_, {in[2], in[3], in[4]});
  const int64_t taps = kernel_[0] * kernel_[1] * kernel_[2];
  plan::LayerShape l;
  l.name = name();
  l.kind = plan::LayerKind::conv;
  l.in_channels = in_channels_;
  l.out_channels = out_channels_;
  l.in_size = {in[2], in[3], in[4]};
  l.out_size = {g.out_size[0], g.out_size[1], g.out_size[2]};
  l.kernel = kernel_[0];
  l.stride = stride_[0];
  l.padding = padding_[0];
  l.weights = out_channels_ * in_channels_ * taps + (bias_ ? out_channels_ : 0);
  l.forward_flops = 2.0 * double(out_channels_ * in_channels_ * taps) * double(g.out_volume());
  l.input_gradient = input_gradient_;
  l.samples = in[0];
  step.layers.push_back(l);
  const Shape out{in[0], out_channels_, g.out_size[0], g.out_size[1], g.out_size[2]};
  // Keeps its input for the filter gradient; the CPU's workspace and columns as the kernels
  // say; on a GPU, its budget of the device's workspace buffer.
  plan::LayerMemory m;
  m.layer = name();
  m.output = activation_bytes(out);
  m.keeps_input = true;
  m.input_grad = input_gradient_ ? activation_bytes(in) : 0;
  if (weight_->value.device().is_cpu()) {
    const ops::Conv3dCpuMemory cpu = cpu_memory(in);
    m.workspace = cpu.workspace;
    m.forward_scratch = cpu.forward_scratch;
    m.backward_scratch = cpu.backward_scratch;
  }
  m.device_workspace = stored_bytes(ops::cuda_conv_workspace_budget(g, in[0]));
  // tf32/bf16 on the host: rounded copies of the operands of the taps that reach the input
  // (none where every output voxel is padding alone).
  const ops::ConvTaps reaching = ops::conv3d_reaching_taps(g);
  if (!reaching.none()) {
    const Shape w = ops::conv3d_weight_shape(reaching.geometry);
    m.forward_scratch += rounded_copies_bytes(math_mode(), weight_->value.device(), {in, w});
    m.backward_scratch += rounded_copies_bytes(math_mode(), weight_->value.device(), {in, out, w});
  }
  step.memory.push_back(m);
  return out;
}

Tensor Conv3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::convolution, name(), ProfilePass::backward);
  require_layer(input_.defined(), "Conv3d", "backward called before forward");
  const Shape want = ops::conv3d_output_shape(geometry_, input_.size(0));
  require_layer(dy.defined() && dy.shape() == want, "Conv3d",
                "dy " + (dy.defined() ? dy.str() : std::string("undefined")) + " does not match the output " +
                    want.str() + " of the last forward (input " + input_.shape().str() + ")");
  Tensor dx;
  if (input_gradient_) dx = Tensor::empty(input_.shape(), input_.dtype(), input_.device());
  std::function<void()> between;
  if (dx.defined() && input_gradient_ready_) between = [&] { input_gradient_ready_(dx); };
  ops::conv3d_backward(input_, dy, weight_->value, geometry_, dx, weight_->grad, math_mode(), between);
  if (bias_) ops::conv3d_backward_bias(dy, bias_->grad);
  input_ = Tensor();  // used: freed now, not at the next forward
  return dx;
}

}  // namespace gridnn::nn
