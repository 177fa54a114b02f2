// CUDA backend of kernels/softmax.h: one warp per row, kWarpsPerBlock rows per block, a
// grid-stride loop over rows.
//
// Lane l of the warp computes lane l's partial of kernels/softmax_bodies.h; the partials
// are combined by a butterfly of __shfl_xor_sync with offsets 16, 8, 4, 2, 1. After the
// butterfly every lane holds the value the CPU's tree (lane l takes lane l + width) leaves
// in lane 0, because float addition and softmax_max are commutative for non-NaN values —
// the order is fixed, not timing-dependent, so every run gives the same bits. Compiled
// with -fmad=false (kernels/CMakeLists.txt) so the bodies round as on the CPU;
// only expf/logf may differ from the host's in the last bits.
#include "kernels/cuda/launch.cuh"
#include "kernels/softmax.h"

namespace gridnn::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kSoftmaxLanes == 32, "one warp per row");

template <class Combine>
__device__ __forceinline__ float warp_tree(float v, Combine combine) {
  for (int width = kSoftmaxLanes / 2; width > 0; width /= 2) v = combine(v, __shfl_xor_sync(kFullMask, v, width));
  return v;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return body::softmax_max(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return body::softmax_sum(a, b); }
};

// The same trip count for every lane of a warp (rows are per warp), so the shuffles are
// always converged.
__device__ __forceinline__ int64_t warp_row() {
  return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kSoftmaxLanes;
}
__device__ __forceinline__ int64_t warp_row_stride() { return int64_t(gridDim.x) * kWarpsPerBlock; }

template <class T>
__global__ void __launch_bounds__(kWarpsPerBlock* kSoftmaxLanes)
    softmax_forward_kernel(const T* x, T* y, SoftmaxShape s) {
  const int lane = int(threadIdx.x % kSoftmaxLanes);
  for (int64_t r = warp_row(); r < s.rows; r += warp_row_stride()) {
    const T* row = x + r * s.cols;
    const float m = warp_tree(body::softmax_lane_max(row, s.cols, lane), MaxOp{});
    const float sum = warp_tree(body::softmax_lane_expsum(row, s.cols, lane, m), SumOp{});
    body::softmax_lane_write(row, y + r * s.cols, s.cols, lane, m, sum);
  }
}

template <class T>
__global__ void __launch_bounds__(kWarpsPerBlock* kSoftmaxLanes)
    softmax_backward_kernel(const T* y, const T* dy, T* dx, SoftmaxShape s) {
  const int lane = int(threadIdx.x % kSoftmaxLanes);
  for (int64_t r = warp_row(); r < s.rows; r += warp_row_stride()) {
    const int64_t o = r * s.cols;
    const float dot = warp_tree(body::softmax_lane_dot(y + o, dy + o, s.cols, lane), SumOp{});
    body::softmax_lane_backward(y + o, dy + o, dx + o, s.cols, lane, dot);
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock* kSoftmaxLanes)
    cross_entropy_forward_kernel(const float* x, const int64_t* labels, float* probs, float* row_loss, SoftmaxShape s) {
  const int lane = int(threadIdx.x % kSoftmaxLanes);
  for (int64_t r = warp_row(); r < s.rows; r += warp_row_stride()) {
    const float* row = x + r * s.cols;
    const float m = warp_tree(body::softmax_lane_max(row, s.cols, lane), MaxOp{});
    const float sum = warp_tree(body::softmax_lane_expsum(row, s.cols, lane, m), SumOp{});
    if (lane == 0) row_loss[r] = body::cross_entropy_row_loss(row, s.cols, labels[r], m, sum);
    body::softmax_lane_write(row, probs + r * s.cols, s.cols, lane, m, sum);
  }
}

__global__ void cross_entropy_backward_kernel(const float* probs, const int64_t* labels, float scale, float* dlogits,
                                              SoftmaxShape s) {
  const int64_t n = s.rows * s.cols;
  for (int64_t e = detail::grid_first(); e < n; e += detail::grid_stride())
    dlogits[e] = body::cross_entropy_grad_at(probs, labels, s.cols, scale, e);
}

unsigned row_blocks(const ::gridnn::cuda::DeviceContext& ctx, int64_t rows) {
  return detail::grid_for(ctx, rows, kWarpsPerBlock);
}

}  // namespace

void softmax_forward(const Tensor& x, Tensor& y, SoftmaxShape s) {
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "softmax_forward", [&] {
    softmax_forward_kernel<<<row_blocks(ctx, s.rows), kWarpsPerBlock * kSoftmaxLanes, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(x.raw()), static_cast<scalar_t*>(y.raw()), s);
    GRIDNN_CHECK_LAUNCH("softmax_forward_kernel");
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, SoftmaxShape s) {
  auto& ctx = detail::context_of(y);
  GRIDNN_DISPATCH_FLOATING(y.dtype(), "softmax_backward", [&] {
    softmax_backward_kernel<<<row_blocks(ctx, s.rows), kWarpsPerBlock * kSoftmaxLanes, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(y.raw()), static_cast<const scalar_t*>(dy.raw()), static_cast<scalar_t*>(dx.raw()),
        s);
    GRIDNN_CHECK_LAUNCH("softmax_backward_kernel");
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& row_loss,
                           SoftmaxShape s) {
  auto& ctx = detail::context_of(logits);
  cross_entropy_forward_kernel<<<row_blocks(ctx, s.rows), kWarpsPerBlock * kSoftmaxLanes, 0, ctx.stream>>>(
      logits.data<float>(), labels.data<int64_t>(), probs.data<float>(), row_loss.data<float>(), s);
  GRIDNN_CHECK_LAUNCH("cross_entropy_forward_kernel");
}

void cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale, Tensor& dlogits, SoftmaxShape s) {
  auto& ctx = detail::context_of(probs);
  cross_entropy_backward_kernel<<<detail::grid_for(ctx, s.rows * s.cols), detail::kThreads, 0, ctx.stream>>>(
      probs.data<float>(), labels.data<int64_t>(), scale, dlogits.data<float>(), s);
  GRIDNN_CHECK_LAUNCH("cross_entropy_backward_kernel");
}

}  // namespace gridnn::kernels::cuda
