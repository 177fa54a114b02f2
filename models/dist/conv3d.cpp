// nn::DistConv3d: halo exchange around the local Conv3d.
#include "models/dist/conv3d.h"

namespace gridnn::nn {

DistConv3d::DistConv3d(parallel::Communicator& row, int64_t in_channels, int64_t out_channels,
                       Triple kernel, Triple stride, Triple padding, bool bias,
                       int64_t global_in_depth, std::string layer)
    // The local convolution pads H and W only: the extended slab's padding planes stand in
    // for the depth padding.
    : Conv3d(in_channels, out_channels, kernel, stride, Triple{0, padding[1], padding[2]}, bias),
      exchange_(row,
                parallel::plan_depth_halo(layer, global_in_depth,
                                      parallel::DepthWindow{kernel[0], stride[0], padding[0]},
                                      row.size(), row.rank()),
                layer) {}

DistConv3d::DistConv3d(parallel::Communicator& row, int64_t in_channels, int64_t out_channels,
                       int64_t kernel, int64_t stride, int64_t padding, bool bias,
                       int64_t global_in_depth, std::string layer)
    : DistConv3d(row, in_channels, out_channels, Triple{kernel, kernel, kernel},
                 Triple{stride, stride, stride}, Triple{padding, padding, padding}, bias,
                 global_in_depth, std::move(layer)) {}

Tensor DistConv3d::forward(const Tensor& x) {
  parallel::CommLayerScope scope(layer_name());
  return Conv3d::forward(exchange_.extend(x, 0.0f));  // halo planes in, own planes out
}

Tensor DistConv3d::backward(const Tensor& dy) {
  parallel::CommLayerScope scope(layer_name());
  Tensor d_extended = Conv3d::backward(dy);  // weight/bias grads: this rank's part only
  if (!d_extended.defined()) return d_extended;
  return exchange_.return_gradient(d_extended);  // halo gradients back to their owners
}

}  // namespace gridnn::nn
