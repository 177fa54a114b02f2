// The CUDA kernel of backward filter with one input channel (kernels/conv3d_one_channel_bodies.h):
// deterministic, the same bits as the CPU's backward_filter_by_tiles. The cuDNN backend
// (kernels/cuda/conv3d_cudnn.cpp) times it against cuDNN's choice on a geometry's first use
// and keeps the faster. cuDNN builds only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/conv3d_bodies.h"

namespace gridnn::kernels::cuda::one_channel {

// True when it runs g on `device`: kernels::one_channel::takes(g), at most kMaxThreads
// threads per tile, and the staged rows fit the device's shared memory.
bool fits(const Conv3dGeometry& g, int device);
// The bytes of its partials for a batch of n (the workspace backward_filter takes).
size_t workspace_bytes(const Conv3dGeometry& g, int64_t n);
// dw [O, 1, kd, kh, kw] += the gradient from x [N, 1, D, H, W] and dy [N, O, Do, Ho, Wo], f32
// CUDA tensors on one device; the partials in `workspace` (workspace_bytes(g, N) bytes). On
// the device's compute stream.
void backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw, void* workspace);

}  // namespace gridnn::kernels::cuda::one_channel
