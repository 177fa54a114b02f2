// The single-process layers.
#include "models/nets/layer_factory.h"

#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"

namespace gridnn::nn {

std::unique_ptr<Module> LayerFactory::conv3d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                             bool bias, int64_t /*in_depth*/, bool input_gradient) const {
  auto conv = std::make_unique<Conv3d>(in, out, kernel, stride, padding, bias);
  conv->set_input_gradient(input_gradient);
  return conv;
}

std::unique_ptr<Module> LayerFactory::batchnorm3d(int64_t channels, int64_t /*depth*/,
                                                  ops::BnActivation activation) const {
  return std::make_unique<BatchNorm3d>(channels, 1e-5, 0.1, Device::cpu(), nullptr, activation);
}

std::unique_ptr<Module> LayerFactory::maxpool3d(int64_t kernel, int64_t stride, int64_t padding,
                                                int64_t /*in_depth*/) const {
  return std::make_unique<MaxPool3d>(kernel, stride, padding);
}

std::unique_ptr<Module> LayerFactory::attention(int64_t channels, int64_t /*depth*/) const {
  return std::make_unique<SelfAttention3d>(channels);
}

std::unique_ptr<Module> LayerFactory::global_avg_pool(int64_t /*positions*/, int64_t /*depth*/) const {
  return std::make_unique<GlobalAvgPool3d>();
}

std::unique_ptr<Module> LayerFactory::linear(int64_t in, int64_t out) const {
  return std::make_unique<Linear>(in, out);
}

}  // namespace gridnn::nn
