// CUDA backend of kernels/optim.h: one grid-stride launch per parameter over the bodies
// the CPU backend loops over (compiled with -fmad=false, so both agree bit for bit).
#include "kernels/cuda/launch.cuh"
#include "kernels/optim.h"

namespace gridnn::kernels::cuda {
namespace {

__global__ void sgd_kernel(SgdConstants s, float* param, const float* grad, float* buf, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) body::sgd_at(s, param, grad, buf, i);
}

__global__ void adam_kernel(AdamConstants s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::adam_at(s, param, grad, exp_avg, exp_avg_sq, i);
}

}  // namespace

void sgd_update(const SgdConstants& s, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  const int64_t n = param.numel();
  auto& ctx = detail::context_of(param);
  float* buf = s.momentum != 0.0f ? momentum_buffer.data<float>() : nullptr;
  sgd_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(s, param.data<float>(), grad.data<float>(),
                                                                            buf, n);
  GRIDNN_CHECK_LAUNCH("sgd_kernel");
}

void adam_update(const AdamConstants& s, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq) {
  const int64_t n = param.numel();
  auto& ctx = detail::context_of(param);
  adam_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
      s, param.data<float>(), grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(), n);
  GRIDNN_CHECK_LAUNCH("adam_kernel");
}

}  // namespace gridnn::kernels::cuda
