// CUDA backend of kernels/reduce.h, in the order of kernels/reduce_bodies.h.
//
// - segment_kernel: one block per (output, segment) pair (grid-stride over the pairs, so
//   few outputs with long rows still fill the device: sum_all of 4 M elements is 1024
//   blocks). The block has L = reduce_lanes(len) threads (one warp at least); thread l
//   computes lane l of the segment (body::reduce_lane), then the lanes are combined in
//   shared memory by body::reduce_tree_step with widths L/2, ..., 1, the loop
//   kernels/cpu/reduce.cpp runs. A dimension of one segment writes the output; longer ones
//   write the segment's result to a scratch tensor, segment-major.
// - fold_kernel (several segments): one thread per output folds its segments' results in
//   order (body::reduce_fold).
// - short_kernel (L <= kThreadLanes: rows and columns of at most 16 elements): one thread
//   per output keeps its L lanes in registers and runs the same lanes and tree, so such
//   reductions do not leave 31 of 32 threads idle.
// All three add in the order of the bodies, and this file is compiled with -fmad=false
// (kernels/CMakeLists.txt), so x * x + acc is not contracted into an FMA either: sum, sum of
// squares and max are bitwise equal to the CPU backend (a warp-shuffle tree would keep that
// order too: lane l < w taking lane l + w is __shfl_down_sync by w). No atomics: every run
// gives the same bits, whatever the number of blocks.
#include "kernels/cuda/launch.cuh"
#include "kernels/reduce.h"

namespace gridnn::kernels::cuda {
namespace {

// The most lanes one thread runs alone (short_kernel); longer rows take a block.
constexpr int kThreadLanes = 16;

// Pair i is segment i % segments of output i / segments. partial == nullptr (one segment):
// the result goes to out[o]; else to partial[k * n_out + o].
template <class Op, class T>
__global__ void __launch_bounds__(kReduceLanes)
    segment_kernel(const T* x, body::ReduceShape s, int64_t n_out, int64_t segments, T* out, float* partial) {
  __shared__ float lanes_of[kReduceLanes];
  const int lane = int(threadIdx.x);
  const int lanes = reduce_lanes(s.len);
  const int64_t pairs = n_out * segments;
  for (int64_t i = blockIdx.x; i < pairs; i += gridDim.x) {  // same trip count for the whole block
    const int64_t o = i / segments, k = i % segments;
    if (lane < lanes) lanes_of[lane] = body::reduce_lane<Op>(x, s, o, reduce_segment(s.len, k), lane, lanes);
    __syncthreads();
    for (int width = lanes / 2; width > 0; width /= 2) {
      if (lane < width) body::reduce_tree_step<Op>(lanes_of, lane, width);
      __syncthreads();
    }
    if (lane == 0) {
      if (partial)
        partial[k * n_out + o] = lanes_of[0];
      else
        out[o] = from_float<T>(lanes_of[0]);
    }
    __syncthreads();  // lanes_of[0] is read before the next pair overwrites it
  }
}

template <class Op, class T>
__global__ void fold_kernel(const float* partial, int64_t n_out, int64_t segments, T* out) {
  for (int64_t o = detail::grid_first(); o < n_out; o += detail::grid_stride())
    out[o] = from_float<T>(body::reduce_fold<Op>(partial, n_out, o, segments));
}

// The tree of short_kernel: widths W, W/2, ..., 1, those below L only (W <= L/2, powers of
// two), so the widths taken are L/2, ..., 1 as in the bodies. Written as a recursion over
// the constant W so every index is a constant and the lanes stay in registers (a loop over
// the widths was vectorized through local memory by nvcc 13).
template <class Op, int W>
__device__ __forceinline__ void short_tree(float* lanes_of, int lanes) {
  if (W < lanes) {
#pragma unroll
    for (int l = 0; l < W; ++l) body::reduce_tree_step<Op>(lanes_of, l, W);
  }
  if constexpr (W > 1) short_tree<Op, W / 2>(lanes_of, lanes);
}

// len <= kThreadLanes: one segment, its L <= kThreadLanes lanes in one thread (lanes l >= L
// are never read).
template <class Op, class T>
__global__ void short_kernel(const T* x, body::ReduceShape s, int64_t n_out, T* out) {
  const int lanes = reduce_lanes(s.len);
  for (int64_t o = detail::grid_first(); o < n_out; o += detail::grid_stride()) {
    float lanes_of[kThreadLanes];
#pragma unroll
    for (int l = 0; l < kThreadLanes; ++l)
      lanes_of[l] = l < lanes ? body::reduce_lane<Op>(x, s, o, ReduceSegment{0, s.len}, l, lanes) : Op::identity();
    short_tree<Op, kThreadLanes / 2>(lanes_of, lanes);
    out[o] = from_float<T>(lanes_of[0]);
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, body::ReduceShape shape, Tensor& out) {
  const int64_t n_out = shape.outer * shape.inner;
  if (n_out == 0) return;
  auto& ctx = detail::context_of(x);
  const int lanes = reduce_lanes(shape.len);
  const int64_t segments = reduce_segments(shape.len);
  // The segments' results (several segments only), from the caching allocator.
  Tensor scratch;
  float* partial = nullptr;
  if (segments > 1) {
    scratch = Tensor::empty({n_out * segments}, DType::f32, out.device());
    partial = static_cast<float*>(scratch.raw());
  }
  visit_reduce(op, [&](auto o) {
    using Op = decltype(o);
    GRIDNN_DISPATCH_FLOATING(x.dtype(), "reduce", [&] {
      const scalar_t* in = static_cast<const scalar_t*>(x.raw());
      scalar_t* result = static_cast<scalar_t*>(out.raw());
      if (lanes <= kThreadLanes) {  // then segments == 1
        short_kernel<Op><<<detail::grid_for(ctx, n_out), detail::kThreads, 0, ctx.stream>>>(in, shape, n_out, result);
        GRIDNN_CHECK_LAUNCH("reduce short_kernel");
        return;
      }
      const unsigned blocks = detail::grid_for(ctx, n_out * segments, 1);  // a pair per block
      segment_kernel<Op><<<blocks, lanes, 0, ctx.stream>>>(in, shape, n_out, segments, result, partial);
      GRIDNN_CHECK_LAUNCH("reduce segment_kernel");
      if (segments == 1) return;
      fold_kernel<Op>
          <<<detail::grid_for(ctx, n_out), detail::kThreads, 0, ctx.stream>>>(partial, n_out, segments, result);
      GRIDNN_CHECK_LAUNCH("reduce fold_kernel");
    });
  });
}

}  // namespace gridnn::kernels::cuda
