// CUDA backend of kernels/reduce.h: one block of kReduceLanes threads per output.
//
// Thread l < L = reduce_lanes(len) of the block computes lane l of kernels/reduce_bodies.h
// (body::reduce_lane), then the lanes are combined in shared memory by
// body::reduce_tree_step with widths L/2, ..., 1 — the loop kernels/cpu/reduce.cpp runs, in the same order, so
// both backends add in the same order. This file is compiled with -fmad=false
// (kernels/CMakeLists.txt), so x * x + acc is not contracted into an FMA either: sum,
// sum of squares and max are meant to be bitwise equal to the CPU backend.
// No atomics: every run gives the same bits. When there are more outputs than the grid
// holds, each block loops over outputs o = blockIdx.x, blockIdx.x + gridDim.x, ...
#include "kernels/cuda/launch.cuh"
#include "kernels/reduce.h"

namespace gridnn::kernels::cuda {
namespace {

template <class Op, class T>
__global__ void __launch_bounds__(kReduceLanes) reduce_kernel(const T* x, body::ReduceShape s,
                                                              T* out, int64_t n_out) {
  __shared__ float partial[kReduceLanes];
  const int lane = int(threadIdx.x);
  const int lanes = reduce_lanes(s.len);
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {  // same trip count for the whole block
    if (lane < lanes) partial[lane] = body::reduce_lane<Op>(x, s, o, lane, lanes);
    __syncthreads();
    for (int width = lanes / 2; width > 0; width /= 2) {
      if (lane < width) body::reduce_tree_step<Op>(partial, lane, width);
      __syncthreads();
    }
    if (lane == 0) out[o] = from_float<T>(partial[0]);
    __syncthreads();  // partial[0] is read before the next output overwrites it
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, body::ReduceShape shape, Tensor& out) {
  const int64_t n_out = shape.outer * shape.inner;
  if (n_out == 0) return;
  auto& ctx = detail::context_of(x);
  const unsigned blocks = detail::grid_for(ctx, n_out, 1);  // one output per block
  visit_reduce(op, [&](auto o) {
    using Op = decltype(o);
    GRIDNN_DISPATCH_FLOATING(x.dtype(), "reduce", [&] {
      reduce_kernel<Op><<<blocks, kReduceLanes, 0, ctx.stream>>>(
          static_cast<const scalar_t*>(x.raw()), shape, static_cast<scalar_t*>(out.raw()), n_out);
      GRIDNN_CHECK_LAUNCH("reduce_kernel");
    });
  });
}

}  // namespace gridnn::kernels::cuda
