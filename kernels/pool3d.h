// 3D pooling over [N, C, D, H, W]: max (with argmax indices), average (count_include_pad,
// PyTorch's default) and global average, forward and backward side by side.
//
// Semantics are PyTorch's MaxPool3d / AvgPool3d with dilation 1 and floor mode: padding
// is -inf for max and counts as zeros for average, the output size along each dimension
// is floor((in + 2p - k) / s) + 1, and the padding may be at most half the kernel.
// Backward passes are gathers (one thread per input element, fixed order): deterministic.
#pragma once

#include <array>

#include "core/tensor.h"
#include "kernels/pool3d_bodies.h"

namespace gridnn::ops {

struct Pool3dParams {
  std::array<int64_t, 3> kernel{1, 1, 1};  // (d, h, w)
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padding{0, 0, 0};
};

// Checks x (rank 5) and the parameters and returns the geometry; errors name `who` (the
// layer or op), the input shape and the parameters, and say what to change.
kernels::Pool3dGeometry pool3d_geometry(const char* who, const Shape& x, const Pool3dParams& p);
// [N, C, od, oh, ow] for an input x (checked as above).
Shape pool3d_output_shape(const char* who, const Shape& x, const Pool3dParams& p);

// y = max over each window; argmax (i64, y's shape) = flat index of the maximum in the
// input's D*H*W volume, which max_pool3d_backward reads.
void max_pool3d_forward(const Tensor& x, const Pool3dParams& p, Tensor& y, Tensor& argmax);
// dx (x's shape, overwritten) = for each input element, the sum of dy over the windows
// whose argmax it is.
void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dParams& p, Tensor& dx);

void avg_pool3d_forward(const Tensor& x, const Pool3dParams& p, Tensor& y);
void avg_pool3d_backward(const Tensor& dy, const Pool3dParams& p, Tensor& dx);

// [N, C, D, H, W] -> [N, C]: the mean over D*H*W (ops::sum's fixed-order reduction,
// then a scale). Backward: dx = dy / (D*H*W) broadcast over the volume.
void global_avg_pool3d_forward(const Tensor& x, Tensor& y);
void global_avg_pool3d_backward(const Tensor& dy, Tensor& dx);

}  // namespace gridnn::ops

// Backend entry points, called by the ops above after their checks. dx here has shape
// x of the geometry; argmax is i64.
namespace gridnn::kernels::cpu {
void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax);
void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dGeometry& g, Tensor& dx);
void avg_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y);
void avg_pool3d_backward(const Tensor& dy, const Pool3dGeometry& g, Tensor& dx);
void global_avg_pool3d_backward(const Tensor& dy, int64_t volume, Tensor& dx);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax);
void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dGeometry& g, Tensor& dx);
void avg_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y);
void avg_pool3d_backward(const Tensor& dy, const Pool3dGeometry& g, Tensor& dx);
void global_avg_pool3d_backward(const Tensor& dy, int64_t volume, Tensor& dx);
}  // namespace gridnn::kernels::cuda
