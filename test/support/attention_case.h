// The distributed attention tests' case (on CPU grids and on the GPU grid): an input and an
// output gradient of one shape [B, C, D, H, W], SelfAttention3d(C) set up as every layer of
// the case is (set_up: seed 7, gamma 0.7), and what one process computes with them on the CPU.
#pragma once

#include <gtest/gtest.h>

#include "kernels/elementwise.h"
#include "models/layers/attention.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {

struct AttentionCase {
  Tensor x, dy;
  nn::SelfAttention3d ref;
  Tensor y_ref, dx_ref;

  explicit AttentionCase(const Shape& shape) : x(random_tensor(shape, 1)), dy(random_tensor(shape, 2)), ref(shape[1]) {
    set_up(ref);
    y_ref = ref.forward(x);
    dx_ref = ref.backward(dy);
  }
  // Initializes `layer` (seed 7) and sets its gamma to 0.7: nonzero, so the attention path
  // matters.
  static void set_up(nn::Module& layer) {
    layer.initialize(7);
    for (auto& [name, p] : layer.named_parameters())
      if (name == "gamma") return ops::fill(p->value, 0.7);
    ADD_FAILURE() << "no parameter gamma";
  }
};

}  // namespace gridnn::test
