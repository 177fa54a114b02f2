// The optimizer updates of one element, for host and device (docs/design.md §3): PyTorch 1.13's
// single-tensor SGD, Adam and AdamW (torch/optim/sgd.py, adam.py, adamw.py), fused into one
// pass that reads the parameter, its grad and its buffers once and writes them in place.
//
// The element math is float, one rounding per operation in PyTorch's order; the scalars
// are PyTorch's Python doubles rounded to float once, as ATen rounds a Python scalar for
// a float tensor (kernels/optim.cpp computes them). Both backends compile these bodies
// without FMA contraction (-ffp-contract=off, -fmad=false), so they agree bit for bit;
// PyTorch's own CPU kernels use FMAs in places (add with alpha), so it differs from
// gridnn in the last bit at most per operation.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/hd.h"

namespace gridnn::kernels {

// The float constants of one SGD update (from ops::SgdSpec).
struct SgdConstants {
  float neg_lr;               // -lr
  float weight_decay;         // 0: no L2 term
  float momentum;             // 0: no momentum buffer (it may be undefined)
  float one_minus_dampening;  // 1 - dampening
  bool nesterov;
  bool first_step;  // the buffer does not exist yet: it starts as d (PyTorch clones d_p)
};

// The float constants of one Adam or AdamW update (from ops::AdamSpec).
struct AdamConstants {
  bool decoupled;      // AdamW: decay the parameter, not the grad
  float weight_decay;  // Adam: the L2 factor added to the grad (0: none)
  float decay_factor;  // AdamW: 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float neg_step_size;          // -lr / bias_correction1
  float bias_correction2_sqrt;  // sqrt(bias_correction2)
  float eps;
};

namespace body {

// SGD (torch.optim.SGD):
//   d = g + wd * p                                 (wd != 0)
//   buf = d                                        (momentum != 0, first step)
//   buf = momentum * buf + (1 - dampening) * d     (momentum != 0, later steps)
//   d = nesterov ? d + momentum * buf : buf        (momentum != 0)
//   p = p + (-lr) * d
GRIDNN_HD GRIDNN_INLINE void sgd_at(const SgdConstants& s, float* param, const float* grad, float* momentum_buffer,
                                    int64_t i) {
  float d = grad[i];
  if (s.weight_decay != 0.0f) d = d + s.weight_decay * param[i];
  if (s.momentum != 0.0f) {
    const float buf = s.first_step ? d : s.momentum * momentum_buffer[i] + s.one_minus_dampening * d;
    momentum_buffer[i] = buf;
    d = s.nesterov ? d + s.momentum * buf : buf;
  }
  param[i] = param[i] + s.neg_lr * d;
}

// Adam (torch.optim.Adam) and AdamW (torch.optim.AdamW), step t counted from 1:
//   Adam:  g' = g + wd * p   (wd != 0)          AdamW: p = p * (1 - lr * wd), g' = g
//   m = beta1 * m + (1 - beta1) * g'
//   v = beta2 * v + ((1 - beta2) * g') * g'
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p + ((-lr / (1 - beta1^t)) * m) / denom
GRIDNN_HD GRIDNN_INLINE void adam_at(const AdamConstants& s, float* param, const float* grad, float* exp_avg,
                                     float* exp_avg_sq, int64_t i) {
  float p = param[i];
  float g = grad[i];
  if (s.decoupled)
    p = p * s.decay_factor;
  else if (s.weight_decay != 0.0f)
    g = g + s.weight_decay * p;
  const float m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
  const float v = s.beta2 * exp_avg_sq[i] + (s.one_minus_beta2 * g) * g;
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  param[i] = p + (s.neg_step_size * m) / denom;
}

}  // namespace body
}  // namespace gridnn::kernels
