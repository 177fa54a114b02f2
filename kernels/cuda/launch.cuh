// Small helpers shared by the CUDA backend (kernels/cuda/*.cu): the stream a tensor's
// kernels go on, a grid size for grid-stride loops, and the 64-bit grid-stride indices.
//
// Every kernel of a device is queued on that device's compute stream
// (core/cuda_context.h); getting the context also makes the device current, which a
// launch on that stream needs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"

namespace gridnn::kernels::cuda::detail {

constexpr int kThreads = 256;     // threads per block of the element-wise kernels
constexpr int kBlocksPerSm = 16;  // grid-stride grids: two waves of 8 resident blocks

// The context of the device `t` lives on (and that device made current).
inline ::gridnn::cuda::DeviceContext& context_of(const Tensor& t) { return ::gridnn::cuda::context(t.device().index); }

// Blocks for `work` independent items of `per_block` items each, capped so that a
// grid-stride loop covers the rest. `work` must be > 0.
inline unsigned grid_for(const ::gridnn::cuda::DeviceContext& ctx, int64_t work, int64_t per_block = kThreads) {
  const int64_t cap = int64_t(std::max(ctx.properties.multiProcessorCount, 1)) * kBlocksPerSm;
  return unsigned(std::min((work + per_block - 1) / per_block, cap));
}

// First element and stride of a 1-D grid-stride loop, in 64 bits.
__device__ __forceinline__ int64_t grid_first() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace gridnn::kernels::cuda::detail
