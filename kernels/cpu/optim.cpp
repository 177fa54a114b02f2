// CPU backend of kernels/optim.h: loops over the shared element bodies.
#include "kernels/optim.h"

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

void sgd_update(const SgdConstants& s, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* buf = s.momentum != 0.0f ? momentum_buffer.data<float>() : nullptr;
  parallel_for(
      param.numel(), [&](int64_t i) { body::sgd_at(s, p, g, buf, i); }, 4);
}

void adam_update(const AdamConstants& s, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq) {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  parallel_for(
      param.numel(), [&](int64_t i) { body::adam_at(s, p, g, m, v, i); }, 8);
}

}  // namespace gridnn::kernels::cpu
