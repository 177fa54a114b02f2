// The Adam update that the optimizer tests run on the kernels directly (test_optim.cpp,
// test_gpu_optim.cpp): lr 1e-2, weight decay 0.05, PyTorch's betas and eps, Adam or AdamW
// (`decoupled`), with the bias corrections of step `t` (from 1).
#pragma once

#include "kernels/optim.h"

namespace gridnn::test {

inline ops::AdamSpec adam_step_spec(bool decoupled, int t) {
  ops::AdamSpec s;
  s.lr = 1e-2;
  s.weight_decay = 0.05;
  s.decoupled = decoupled;
  s.bias_correction1 = ops::adam_bias_correction(s.beta1, t);
  s.bias_correction2 = ops::adam_bias_correction(s.beta2, t);
  return s;
}

}  // namespace gridnn::test
