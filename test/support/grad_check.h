// Central-difference gradient checking, for every op and layer.
//
// Usage (checking dL/dx for a layer y = f(x) with the generic loss L = sum(y * w)):
//
//   Tensor w = random_tensor(y_shape, 7);
//   auto loss = [&] { Tensor y = forward(x); return weighted_sum(y, w); };
//   Tensor dx = backward(w);                 // dL/dy = w
//   EXPECT_TRUE(check_gradient(loss, x, dx));
//
// `x` must be a CPU f32 tensor; its elements are perturbed in place and restored. The
// loss is evaluated in double from the float forward. Large tensors are checked at a
// deterministic sample of elements; `skip` excludes points near kinks (ReLU at 0, max ties).
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "core/tensor.h"

namespace gridnn::test {

struct GradCheckOptions {
  double eps = 1e-3;   // perturbation (float forward: ~1e-3 balances truncation and rounding)
  double atol = 2e-3;  // |numeric - analytic| <= atol + rtol * |numeric|
  double rtol = 1e-2;
  int64_t max_points = 96;            // elements checked at most (a strided sample beyond this)
  std::function<bool(int64_t)> skip;  // true: do not check element i
  // For compositions with kinks inside (a residual block: ReLUs behind BatchNorms, where
  // any weight moves every activation): also evaluate the loss at the point itself and
  // skip an element whose one-sided slopes disagree (a kink within eps), failing when more
  // than two and more than a quarter of the elements are skipped so.
  bool skip_kinks = false;
};

::testing::AssertionResult check_gradient(const std::function<double()>& loss, Tensor& x, const Tensor& analytic_grad,
                                          const GradCheckOptions& options = {});

// sum_i y_i * w_i in double: a loss whose gradient with respect to y is w.
double weighted_sum(const Tensor& y, const Tensor& w);

}  // namespace gridnn::test
