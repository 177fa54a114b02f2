// Fused optimizer updates: one pass per parameter does the whole update in place, the
// parameter, its grad and its buffers read and written once. The list forms update many
// parameters with one spec: on the CPU in one parallel pass over all their elements (one
// OpenMP region per step instead of one per parameter); on a GPU in one launch per group of
// parameters, each thread walking their concatenated elements. The formulas are PyTorch
// 1.13's (torch.optim.SGD, Adam, AdamW; single-tensor path), written out in
// kernels/optim_bodies.h. Every tensor is f32 (the fp32 master weights and their state),
// of one shape and on one device; no two of them may share memory.
//
// The hyper-parameters are doubles, as PyTorch's Python scalars are; the update rounds
// each to float once (1 - dampening, 1 - beta, -lr / bias_correction1 computed in double
// first), as ATen does for a float tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/optim_bodies.h"

namespace gridnn::ops {

struct SgdSpec {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // momentum_buffer is fresh: it becomes d instead of decaying
};

// SGD, in place:
//   d = g + wd * p;  buf = first_step ? d : momentum * buf + (1 - dampening) * d;
//   d = nesterov ? d + momentum * buf : buf;  p -= lr * d
// (the momentum lines only when momentum != 0). `momentum_buffer` may be undefined when
// momentum == 0; on the first step its old values are not read.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdSpec& spec);

// One parameter's tensors for the list form; momentum_buffer as above (it may point to an
// undefined tensor when momentum == 0).
struct SgdTensors {
  Tensor* param;
  const Tensor* grad;
  Tensor* momentum_buffer;
};
// sgd_update on every entry, bit for bit; each entry checked as sgd_update checks it.
void sgd_update(const std::vector<SgdTensors>& tensors, const SgdSpec& spec);

struct AdamSpec {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;         // false: Adam (L2 in the grad); true: AdamW (decay of p)
  double bias_correction1 = 1.0;  // 1 - beta1^t at step t (adam_bias_correction)
  double bias_correction2 = 1.0;  // 1 - beta2^t
};

// 1 - beta^step, in double as PyTorch computes it (step = 1 for the first update).
double adam_bias_correction(double beta, int64_t step);

// Adam / AdamW, in place:
//   Adam: g' = g + wd * p  |  AdamW: p *= 1 - lr * wd, g' = g
//   m = beta1 * m + (1 - beta1) * g';  v = beta2 * v + (1 - beta2) * g'^2
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// exp_avg and exp_avg_sq start as zeros.
void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamSpec& spec);

struct AdamTensors {
  Tensor* param;
  const Tensor* grad;
  Tensor* exp_avg;
  Tensor* exp_avg_sq;
};
// adam_update on every entry, bit for bit; each entry checked as adam_update checks it.
void adam_update(const std::vector<AdamTensors>& tensors, const AdamSpec& spec);

}  // namespace gridnn::ops

namespace gridnn::kernels::cpu {
void sgd_update(const SgdConstants& s, Tensor& param, const Tensor& grad, Tensor& momentum_buffer);
void adam_update(const AdamConstants& s, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq);
// The list forms: every entry's elements in one parallel pass.
void sgd_update(const SgdConstants& s, const std::vector<ops::SgdTensors>& tensors);
void adam_update(const AdamConstants& s, const std::vector<ops::AdamTensors>& tensors);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void sgd_update(const SgdConstants& s, Tensor& param, const Tensor& grad, Tensor& momentum_buffer);
void adam_update(const AdamConstants& s, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq);
// The list forms, every entry on the first's device: a launch per group of entries.
void sgd_update(const SgdConstants& s, const std::vector<ops::SgdTensors>& tensors);
void adam_update(const AdamConstants& s, const std::vector<ops::AdamTensors>& tensors);
}  // namespace gridnn::kernels::cuda
