// CUDA backend of kernels/batchnorm.h: kernels over the bodies of kernels/batchnorm_bodies.h.
//
// Channel sums, in two kernels. segment_sums_kernel: one block of max(L, 32) threads per
// segment of kernels/batchnorm_bodies.h (grid-stride over segments); thread l < L =
// bn_lanes(s) accumulates lane l in double (body::bn_stat_lane / bn_grad_lane), then the
// lanes are combined in shared memory by body::bn_tree_step with widths L/2, ..., 1 — the
// order of the CPU loop — and the segment's two sums go to a scratch tensor. fold_kernel:
// one thread per channel folds that channel's segments in order (body::bn_fold_channel).
// A batch has n * c * ceil(s / kBatchNormSegment) segments, so even few channels fill the
// device: [8, 16, 32, 32, 32] is 256 blocks of 256 threads (two segments per plane),
// [8, 128, 4, 4, 4] 1024 blocks of 64 (one per plane); the grid is capped at 16 blocks per
// SM (2112 on 132 SMs), beyond which blocks loop over segments. Compiled with -fmad=false
// (no FMA contraction), so the sums are meant to equal the CPU backend's bitwise. No
// atomics. Per-channel steps: one thread per channel. Per-element steps: grid-stride loops
// over the same per-element bodies as the CPU.
#include "kernels/batchnorm.h"
#include "kernels/cuda/launch.cuh"

namespace gridnn::kernels::cuda {
namespace {

const float* ptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw()) : nullptr; }
float* ptr(Tensor& t) { return t.defined() ? static_cast<float*>(t.raw()) : nullptr; }

// A BnBackwardGate as device pointers (relu false: none).
struct BnGatePointers {
  bool relu = false;
  const float *invstd = nullptr, *weight = nullptr, *bias = nullptr;
};

BnGatePointers pointers_of(const BnBackwardGate& gate, const Tensor& invstd) {
  return {gate.activation == BnActivation::relu, ptr(invstd), ptr(gate.weight), ptr(gate.bias)};
}

// Backward false: statistics sums of x around shift_or_mean (dy and gate unused). Backward
// true: sums of dy and dy * (x - mean) with mean = shift_or_mean, dy through the gate.
// Segment i's two sums go to seg_a[i], seg_b[i].
template <class T>
__global__ void __launch_bounds__(kReduceLanes)
    segment_sums_kernel(bool backward, const T* x, const T* dy, const float* shift_or_mean, BnGatePointers gate,
                        BatchNormGeometry g, int64_t segments, double* seg_a, double* seg_b) {
  __shared__ double a[kReduceLanes];
  __shared__ double b[kReduceLanes];
  const int lane = int(threadIdx.x);
  const int lanes = bn_lanes(g.s);
  for (int64_t i = blockIdx.x; i < segments; i += gridDim.x) {  // same trip count for the whole block
    const BatchNormSegment seg = bn_segment(g, i);
    const double k = shift_or_mean ? double(shift_or_mean[seg.channel]) : 0.0;
    if (lane < lanes) {
      if (backward) {
        body::BnNormalizeCoeffs kg{};
        if (gate.relu) kg = body::bn_normalize_coeffs(seg.channel, shift_or_mean, gate.invstd, gate.weight, gate.bias);
        body::bn_grad_lane(x, dy, seg, k, gate.relu ? &kg : nullptr, lane, lanes, &a[lane], &b[lane]);
      } else {
        body::bn_stat_lane(x, seg, k, lane, lanes, &a[lane], &b[lane]);
      }
    }
    __syncthreads();
    for (int width = lanes / 2; width > 0; width /= 2) {
      if (lane < width) body::bn_tree_step(a, b, lane, width);
      __syncthreads();
    }
    if (lane == 0) {
      seg_a[i] = a[0];
      seg_b[i] = b[0];
    }
    __syncthreads();  // a[0], b[0] are read before the next segment overwrites them
  }
}

// Channel c's sums from its segments' (invstd: as body::bn_store_sums).
__global__ void fold_kernel(const double* seg_a, const double* seg_b, BatchNormGeometry g, const float* invstd,
                            float* sums) {
  for (int64_t c = detail::grid_first(); c < g.c; c += detail::grid_stride()) {
    double a, b;
    body::bn_fold_channel(seg_a, seg_b, g, c, &a, &b);
    body::bn_store_sums(c, g.c, a, b, invstd, sums);
  }
}

__global__ void moments_kernel(int64_t channels, const float* sums, const float* shift, int64_t count, float* mean,
                               float* var) {
  for (int64_t c = detail::grid_first(); c < channels; c += detail::grid_stride())
    body::bn_moments_at(c, channels, sums, shift, count, mean, var);
}

__global__ void invstd_kernel(int64_t channels, const float* var, double eps, float* invstd) {
  for (int64_t c = detail::grid_first(); c < channels; c += detail::grid_stride())
    body::bn_invstd_at(c, var, eps, invstd);
}

__global__ void update_running_kernel(int64_t channels, const float* mean, const float* var, int64_t count,
                                      double momentum, float* running_mean, float* running_var,
                                      int64_t* num_batches_tracked) {
  for (int64_t c = detail::grid_first(); c < channels; c += detail::grid_stride())
    body::bn_update_running_at(c, mean, var, count, momentum, running_mean, running_var);
  if (num_batches_tracked && detail::grid_first() == 0) *num_batches_tracked += 1;
}

template <class T>
__global__ void normalize_kernel(const T* x, BatchNormGeometry g, const float* mean, const float* invstd,
                                 const float* weight, const float* bias, BnActivation activation, T* y, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::bn_normalize_at(i, x, g, mean, invstd, weight, bias, activation, y);
}

template <class T>
__global__ void relu_gate_kernel(const T* x, const T* dy, BatchNormGeometry g, const float* mean, const float* invstd,
                                 const float* weight, const float* bias, T* gated, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::bn_relu_gate_at(i, x, dy, g, mean, invstd, weight, bias, gated);
}

template <class T>
__global__ void backward_input_kernel(const T* x, const T* dy, BatchNormGeometry g, const float* mean,
                                      const float* invstd, const float* weight, const float* sums, int64_t count,
                                      bool training, BnGatePointers gate, T* dx, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::bn_backward_input_at(i, x, dy, g, mean, invstd, weight, sums, count, training, gate.relu, gate.weight,
                               gate.bias, dx);
}

template <class T>
void launch_channel_sums(bool backward, const T* x, const T* dy, const float* k, const float* invstd,
                         BnGatePointers gate, BatchNormGeometry g, Tensor& sums, ::gridnn::cuda::DeviceContext& ctx) {
  const int64_t segments = bn_segment_count(g);
  // The segments' sums, [a; b] in double: an i64 tensor of the same size holds them (there
  // is no f64 dtype); from the caching allocator, so no cudaMalloc in a training step.
  Tensor scratch;
  double *seg_a = nullptr, *seg_b = nullptr;
  if (segments > 0) {
    scratch = Tensor::empty({2 * segments}, DType::i64, sums.device());
    seg_a = static_cast<double*>(scratch.raw());
    seg_b = seg_a + segments;
    const unsigned blocks = detail::grid_for(ctx, segments, 1);  // one segment per block
    // A thread per lane (one warp at least): small planes do not idle most of a block.
    const int threads = bn_lanes(g.s) > 32 ? bn_lanes(g.s) : 32;
    segment_sums_kernel<<<blocks, threads, 0, ctx.stream>>>(backward, x, dy, k, gate, g, segments, seg_a, seg_b);
    GRIDNN_CHECK_LAUNCH("segment_sums_kernel");
  }
  fold_kernel<<<detail::grid_for(ctx, g.c), detail::kThreads, 0, ctx.stream>>>(seg_a, seg_b, g, invstd,
                                                                               static_cast<float*>(sums.raw()));
  GRIDNN_CHECK_LAUNCH("fold_kernel");
}

}  // namespace

void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, BatchNormGeometry g, Tensor& sums) {
  if (g.c == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_channel_sums", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    launch_channel_sums<scalar_t>(false, in, nullptr, ptr(shift), nullptr, BnGatePointers{}, g, sums, ctx);
  });
}

void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                             const BnBackwardGate& gate, BatchNormGeometry g, Tensor& sums) {
  if (g.c == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_backward_sums", [&] {
    launch_channel_sums<scalar_t>(true, static_cast<const scalar_t*>(x.raw()), static_cast<const scalar_t*>(dy.raw()),
                                  ptr(mean), ptr(invstd), pointers_of(gate, invstd), g, sums, ctx);
  });
}

void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean, Tensor& var) {
  const int64_t c = sums.size(1);
  if (c == 0) return;
  auto& ctx = detail::context_of(sums);
  moments_kernel<<<detail::grid_for(ctx, c), detail::kThreads, 0, ctx.stream>>>(c, ptr(sums), ptr(shift), count,
                                                                                ptr(mean), ptr(var));
  GRIDNN_CHECK_LAUNCH("moments_kernel");
}

void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd) {
  const int64_t c = var.numel();
  if (c == 0) return;
  auto& ctx = detail::context_of(var);
  invstd_kernel<<<detail::grid_for(ctx, c), detail::kThreads, 0, ctx.stream>>>(c, ptr(var), eps, ptr(invstd));
  GRIDNN_CHECK_LAUNCH("invstd_kernel");
}

void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked) {
  const int64_t c = mean.numel();
  auto& ctx = detail::context_of(mean);
  int64_t* nbt = num_batches_tracked.defined() ? static_cast<int64_t*>(num_batches_tracked.raw()) : nullptr;
  update_running_kernel<<<detail::grid_for(ctx, c > 0 ? c : 1), detail::kThreads, 0, ctx.stream>>>(
      c, ptr(mean), ptr(var), count, momentum, ptr(running_mean), ptr(running_var), nbt);
  GRIDNN_CHECK_LAUNCH("update_running_kernel");
}

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& bias, BnActivation activation, BatchNormGeometry g, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_normalize", [&] {
    normalize_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(x.raw()), g, ptr(mean), ptr(invstd), ptr(weight), ptr(bias), activation,
        static_cast<scalar_t*>(y.raw()), n);
    GRIDNN_CHECK_LAUNCH("normalize_kernel");
  });
}

void batchnorm_relu_gate(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, BatchNormGeometry g, Tensor& gated) {
  const int64_t n = x.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_relu_gate", [&] {
    relu_gate_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(x.raw()), static_cast<const scalar_t*>(dy.raw()), g, ptr(mean), ptr(invstd),
        ptr(weight), ptr(bias), static_cast<scalar_t*>(gated.raw()), n);
    GRIDNN_CHECK_LAUNCH("relu_gate_kernel");
  });
}

void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& sums, int64_t count, bool training,
                              const BnBackwardGate& gate, BatchNormGeometry g, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_backward_input", [&] {
    backward_input_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(x.raw()), static_cast<const scalar_t*>(dy.raw()), g, ptr(mean), ptr(invstd),
        ptr(weight), ptr(sums), count, training, pointers_of(gate, invstd), static_cast<scalar_t*>(dx.raw()), n);
    GRIDNN_CHECK_LAUNCH("backward_input_kernel");
  });
}

}  // namespace gridnn::kernels::cuda
