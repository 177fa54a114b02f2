// nn::DistMaxPool3d, nn::DistAvgPool3d: halo exchange around the local pooling.
#include "models/dist/pool3d.h"

#include <limits>

namespace gridnn::nn {
namespace {

Triple3 resolved_stride(Triple3 kernel, Triple3 stride) {
  return stride == Triple3{0, 0, 0} ? kernel : stride;
}

// The local pooling's padding: H and W as given, none along depth (the extended slab's
// padding planes stand in for it).
Triple3 local_padding(Triple3 padding) { return {0, padding[1], padding[2]}; }

// The halo of the global pooling; also checks PyTorch's rule (padding at most half the
// kernel) along depth, which the local pooling no longer sees.
parallel::DepthHalo plan(const std::string& layer, parallel::Communicator& row, Triple3 kernel,
                     Triple3 stride, Triple3 padding, int64_t global_in_depth) {
  require_layer(padding[0] >= 0 && 2 * padding[0] <= kernel[0], layer,
                "depth padding " + std::to_string(padding[0]) +
                    " must be at most half the kernel " + std::to_string(kernel[0]));
  const Triple3 s = resolved_stride(kernel, stride);
  return parallel::plan_depth_halo(layer, global_in_depth, parallel::DepthWindow{kernel[0], s[0], padding[0]},
                               row.size(), row.rank());
}

}  // namespace

DistMaxPool3d::DistMaxPool3d(parallel::Communicator& row, Triple3 kernel, Triple3 stride,
                             Triple3 padding, int64_t global_in_depth, std::string layer)
    : local_(kernel, resolved_stride(kernel, stride), local_padding(padding)),
      exchange_(row, plan(layer, row, kernel, stride, padding, global_in_depth), layer) {}

DistMaxPool3d::DistMaxPool3d(parallel::Communicator& row, int64_t kernel, int64_t stride,
                             int64_t padding, int64_t global_in_depth, std::string layer)
    : DistMaxPool3d(row, Triple3{kernel, kernel, kernel}, Triple3{stride, stride, stride},
                    Triple3{padding, padding, padding}, global_in_depth, std::move(layer)) {}

Tensor DistMaxPool3d::forward(const Tensor& x) {
  parallel::CommLayerScope scope(layer_name());
  return local_.forward(exchange_.extend(x, -std::numeric_limits<float>::infinity()));
}

Tensor DistMaxPool3d::backward(const Tensor& dy) {
  parallel::CommLayerScope scope(layer_name());
  return exchange_.return_gradient(local_.backward(dy));
}

DistAvgPool3d::DistAvgPool3d(parallel::Communicator& row, Triple3 kernel, Triple3 stride,
                             Triple3 padding, int64_t global_in_depth, std::string layer)
    : local_(kernel, resolved_stride(kernel, stride), local_padding(padding)),
      exchange_(row, plan(layer, row, kernel, stride, padding, global_in_depth), layer) {}

DistAvgPool3d::DistAvgPool3d(parallel::Communicator& row, int64_t kernel, int64_t stride,
                             int64_t padding, int64_t global_in_depth, std::string layer)
    : DistAvgPool3d(row, Triple3{kernel, kernel, kernel}, Triple3{stride, stride, stride},
                    Triple3{padding, padding, padding}, global_in_depth, std::move(layer)) {}

Tensor DistAvgPool3d::forward(const Tensor& x) {
  parallel::CommLayerScope scope(layer_name());
  return local_.forward(exchange_.extend(x, 0.0f));
}

Tensor DistAvgPool3d::backward(const Tensor& dy) {
  parallel::CommLayerScope scope(layer_name());
  return exchange_.return_gradient(local_.backward(dy));
}

}  // namespace gridnn::nn
