// nn::MaxPool3d, nn::AvgPool3d, nn::GlobalAvgPool3d on the ops of kernels/pool3d.h. The
// layer checks name the layer ("MaxPool3d: ..."); the ops check again for direct callers.
#include "models/layers/pool3d.h"

namespace gridnn::nn {
namespace {

ops::Pool3dParams make_params(const char* layer, Triple3 kernel, Triple3 stride, Triple3 padding) {
  const bool default_stride = stride == Triple3{0, 0, 0};
  for (int i = 0; i < 3; ++i)
    require_layer(kernel[size_t(i)] >= 1 && (default_stride || stride[size_t(i)] >= 1) &&
                      padding[size_t(i)] >= 0,
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
                "dy " + (dy.defined() ? dy.shape().str() : std::string("(undefined)")) +
                    " does not match the output " + expected.str() + " of the input " +
                    input.str());
}

}  // namespace

MaxPool3d::MaxPool3d(Triple3 kernel, Triple3 stride, Triple3 padding)
    : params_(make_params("MaxPool3d", kernel, stride, padding)) {}
MaxPool3d::MaxPool3d(int64_t kernel, int64_t stride, int64_t padding)
    : MaxPool3d(Triple3{kernel, kernel, kernel}, Triple3{stride, stride, stride},
                Triple3{padding, padding, padding}) {}

Tensor MaxPool3d::forward(const Tensor& x) {
  Shape out = checked_output("MaxPool3d", x, params_);
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  if (!argmax_.defined() || argmax_.shape() != out || argmax_.device() != x.device())
    argmax_ = Tensor::empty(out, DType::i64, x.device());
  ops::max_pool3d_forward(x, params_, y, argmax_);
  input_shape_ = x.shape();
  return y;
}

Tensor MaxPool3d::backward(const Tensor& dy) {
  check_dy("MaxPool3d", input_shape_, argmax_.defined() ? argmax_.shape() : Shape{}, dy);
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  ops::max_pool3d_backward(dy, argmax_, params_, dx);
  return dx;
}

AvgPool3d::AvgPool3d(Triple3 kernel, Triple3 stride, Triple3 padding)
    : params_(make_params("AvgPool3d", kernel, stride, padding)) {}
AvgPool3d::AvgPool3d(int64_t kernel, int64_t stride, int64_t padding)
    : AvgPool3d(Triple3{kernel, kernel, kernel}, Triple3{stride, stride, stride},
                Triple3{padding, padding, padding}) {}

Tensor AvgPool3d::forward(const Tensor& x) {
  Tensor y = Tensor::empty(checked_output("AvgPool3d", x, params_), x.dtype(), x.device());
  ops::avg_pool3d_forward(x, params_, y);
  input_shape_ = x.shape();
  return y;
}

Tensor AvgPool3d::backward(const Tensor& dy) {
  check_dy("AvgPool3d", input_shape_,
           input_shape_.rank() == 5 ? ops::pool3d_output_shape("AvgPool3d", input_shape_, params_)
                                    : Shape{},
           dy);
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  ops::avg_pool3d_backward(dy, params_, dx);
  return dx;
}

Tensor GlobalAvgPool3d::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 5, "GlobalAvgPool3d",
                "expects a [N, C, D, H, W] input, got " +
                    (x.defined() ? x.str() : std::string("(undefined)")));
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), x.device());
  ops::global_avg_pool3d_forward(x, y);
  input_shape_ = x.shape();
  return y;
}

Tensor GlobalAvgPool3d::backward(const Tensor& dy) {
  check_dy("GlobalAvgPool3d", input_shape_,
           input_shape_.rank() == 5 ? Shape{input_shape_[0], input_shape_[1]} : Shape{}, dy);
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  ops::global_avg_pool3d_backward(dy, dx);
  return dx;
}

}  // namespace gridnn::nn
