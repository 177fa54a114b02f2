// The synchronized batch-norm tests' case (on CPU grids and on the GPU grid): an input whose
// mean is far from 0, an output gradient, weight and bias, and what one process computes
// with them on the CPU (training forward and backward, then evaluation).
#pragma once

#include <cstdint>

#include "kernels/elementwise.h"
#include "models/layers/batchnorm3d.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {

struct BatchNormCase {
  static constexpr int64_t B = 4, C = 3, D = 5, H = 3, W = 2;
  Tensor x = random_tensor({B, C, D, H, W}, 11, 1.0f, 4.0f);
  Tensor dy = random_tensor({B, C, D, H, W}, 12);
  Tensor gamma = random_tensor({C}, 13, 0.5f, 1.5f), beta = random_tensor({C}, 14);
  nn::BatchNorm3d ref{C};
  Tensor y_ref, dx_ref, y_eval_ref;

  BatchNormCase() {
    set_affine(ref);
    y_ref = ref.forward(x);
    dx_ref = ref.backward(dy);
    ref.eval();
    y_eval_ref = ref.forward(x);
  }
  // The case's weight and bias into `bn`.
  void set_affine(nn::BatchNorm3d& bn) const {
    ops::copy(gamma, bn.weight().value);
    ops::copy(beta, bn.bias().value);
  }
};

}  // namespace gridnn::test
