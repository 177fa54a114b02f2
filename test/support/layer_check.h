// Gradient checks for a whole layer: with the generic loss L = sum(forward(x) * w) for a
// fixed random w, backward(w) must match central differences of L with respect to the
// input and to every parameter.
//
//   nn::Conv3d conv(...);
//   Tensor x = random_tensor({2, 3, 5, 4, 6}, 1);
//   EXPECT_TRUE(check_layer_gradients(conv, x));
//
// The layer must be deterministic across repeated forwards (dropout: fixed mask seed).
// x must be a CPU f32 tensor; parameters must be CPU f32.
#pragma once

#include <gtest/gtest.h>

#include "models/layers/module.h"
#include "test/support/grad_check.h"

namespace gridnn::test {

struct LayerCheckOptions {
  GradCheckOptions grad;  // tolerances and sampling, shared by every tensor checked
  bool check_input = true;
  bool check_parameters = true;
  uint64_t seed = 99;  // for w
};

::testing::AssertionResult check_layer_gradients(nn::Module& layer, Tensor& x, const LayerCheckOptions& options = {});

}  // namespace gridnn::test
