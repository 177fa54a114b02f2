// nn::MaxPool3d, nn::AvgPool3d, nn::GlobalAvgPool3d on the ops of kernels/pool3d.h. The
// layer checks name the layer ("MaxPool3d: ..."); the ops check again for direct callers.
#include "models/layers/pool3d.h"

#include "core/profile.h"

namespace gridnn::nn {
namespace {

ops::Pool3dParams make_params(const char* layer, Triple3 kernel, Triple3 stride, Triple3 padding) {
  const bool default_stride = stride == Triple3{0, 0, 0};
  for (int i = 0; i < 3; ++i)
    require_layer(kernel[size_t(i)] >= 1 && (default_stride || stride[size_t(i)] >= 1) && padding[size_t(i)] >= 0,
                  layer, "kernel and stride must be >= 1 and padding >= 0");
  return ops::Pool3dParams{kernel, default_stride ? kernel : stride, padding};
}

// Output shape of x, with errors that name the layer (ops::pool3d_geometry's messages).
Shape checked_output(const char* layer, const Tensor& x, const ops::Pool3dParams& p) {
  require_layer(x.defined(), layer, "forward got an undefined input");
  return ops::pool3d_output_shape(layer, x.shape(), p);
}

void check_dy(const char* layer, const Shape& input, const Shape& expected, const Tensor& dy) {
  require_layer(input.rank() == 5, layer, "backward called before forward");
  require_layer(dy.defined() && dy.shape() == expected, layer,
                "dy " + (dy.defined() ? dy.shape().str() : std::string("(undefined)")) + " does not match the output " +
                    expected.str() + " of the input " + input.str());
}

}  // namespace

plan::LayerShape pool_layer_shape(const std::string& name, plan::LayerKind kind, const Shape& in, const Shape& out,
                                  const Triple3& kernel, const Triple3& stride, const Triple3& padding) {
  plan::LayerShape l;
  l.name = name;
  l.kind = kind;
  l.in_channels = l.out_channels = in[1];
  l.in_size = {in[2], in[3], in[4]};
  l.samples = in[0];
  l.out_size = {1, 1, 1};
  if (out.rank() == 5) l.out_size = {out[2], out[3], out[4]};
  l.kernel = kernel[0];
  l.stride = stride[0];
  l.padding = padding[0];
  const double taps = double(kernel[0] * kernel[1] * kernel[2]);
  const double voxels = double(kind == plan::LayerKind::global_pool ? in[2] * in[3] * in[4]
                                                                    : l.out_size[0] * l.out_size[1] * l.out_size[2]);
  l.forward_flops = (kind == plan::LayerKind::global_pool ? 1.0 : taps) * double(in[1]) * voxels;
  return l;
}

namespace {
// A pooling layer's memory: its output, the dx of its input's shape, and what it keeps (max
// pooling: the i64 index of each output's maximum).
plan::LayerMemory pool_memory(const std::string& name, const Shape& in, const Shape& out, int64_t kept) {
  plan::LayerMemory m;
  m.layer = name;
  m.output = activation_bytes(out);
  m.input_grad = activation_bytes(in);
  m.kept = kept;
  return m;
}

// A window pooling layer's cost and memory, from in to its output; kept as pool_memory.
Shape describe_window_pool(const std::string& name, const Shape& in, const ops::Pool3dParams& params,
                           int64_t kept_per_output, plan::RankStep& step) {
  const Shape out = ops::pool3d_output_shape(name.c_str(), in, params);
  step.layers.push_back(
      pool_layer_shape(name, plan::LayerKind::pool, in, out, params.kernel, params.stride, params.padding));
  step.memory.push_back(pool_memory(name, in, out, out.numel() * kept_per_output));
  return out;
}
}  // namespace

MaxPool3d::MaxPool3d(Triple3 kernel, Triple3 stride, Triple3 padding)
    : Module("MaxPool3d"), params_(make_params("MaxPool3d", kernel, stride, padding)) {}
MaxPool3d::MaxPool3d(int64_t kernel, int64_t stride, int64_t padding)
    : MaxPool3d(Triple3{kernel, kernel, kernel}, Triple3{stride, stride, stride}, Triple3{padding, padding, padding}) {}

Tensor MaxPool3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::forward);
  Shape out = checked_output("MaxPool3d", x, params_);
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  if (!argmax_.defined() || argmax_.shape() != out || argmax_.device() != x.device())
    argmax_ = Tensor::empty(out, DType::i64, x.device());
  ops::max_pool3d_forward(x, params_, y, argmax_);
  if (NoBackwardScope::active()) argmax_ = Tensor();
  input_shape_ = x.shape();
  return y;
}

Shape MaxPool3d::describe(const Shape& in, plan::RankStep& step) const {
  return describe_window_pool(name(), in, params_, int64_t(sizeof(int64_t)), step);  // the argmax
}

Tensor MaxPool3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::backward);
  check_dy("MaxPool3d", input_shape_, argmax_.defined() ? argmax_.shape() : Shape{}, dy);
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  ops::max_pool3d_backward(dy, argmax_, params_, dx);
  argmax_ = Tensor();  // used: freed now, not at the next forward
  return dx;
}

AvgPool3d::AvgPool3d(Triple3 kernel, Triple3 stride, Triple3 padding)
    : Module("AvgPool3d"), params_(make_params("AvgPool3d", kernel, stride, padding)) {}
AvgPool3d::AvgPool3d(int64_t kernel, int64_t stride, int64_t padding)
    : AvgPool3d(Triple3{kernel, kernel, kernel}, Triple3{stride, stride, stride}, Triple3{padding, padding, padding}) {}

Tensor AvgPool3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::forward);
  Tensor y = Tensor::empty(checked_output("AvgPool3d", x, params_), x.dtype(), x.device());
  ops::avg_pool3d_forward(x, params_, y);
  input_shape_ = x.shape();
  return y;
}

Shape AvgPool3d::describe(const Shape& in, plan::RankStep& step) const {
  return describe_window_pool(name(), in, params_, 0, step);
}

Tensor AvgPool3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::backward);
  check_dy("AvgPool3d", input_shape_,
           input_shape_.rank() == 5 ? ops::pool3d_output_shape("AvgPool3d", input_shape_, params_) : Shape{}, dy);
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  ops::avg_pool3d_backward(dy, params_, dx);
  return dx;
}

Tensor GlobalAvgPool3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::forward);
  require_layer(x.defined() && x.rank() == 5, "GlobalAvgPool3d",
                "expects a [N, C, D, H, W] input, got " + (x.defined() ? x.str() : std::string("(undefined)")));
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), x.device());
  ops::global_avg_pool3d_forward(x, y);
  input_shape_ = x.shape();
  return y;
}

Shape GlobalAvgPool3d::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5, name(), "cannot run on an input " + in.str());
  step.layers.push_back(
      pool_layer_shape(name(), plan::LayerKind::global_pool, in, Shape{in[0], in[1]}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}));
  step.memory.push_back(pool_memory(name(), in, Shape{in[0], in[1]}, 0));
  return {in[0], in[1]};
}

Tensor GlobalAvgPool3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::backward);
  check_dy("GlobalAvgPool3d", input_shape_,
           input_shape_.rank() == 5 ? Shape{input_shape_[0], input_shape_[1]} : Shape{}, dy);
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  ops::global_avg_pool3d_backward(dy, dx);
  return dx;
}

}  // namespace gridnn::nn
