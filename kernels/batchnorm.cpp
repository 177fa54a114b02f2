// Argument checks and backend dispatch of the batch-normalization steps (kernels/batchnorm.h).
#include "kernels/batchnorm.h"

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

BatchNormGeometry geometry_of(const char* op, const Tensor& x) {
  expect_defined(op, "x", x);
  expect_floating(op, x);
  GRIDNN_REQUIRE(x.rank() >= 2, op, ": expects x of shape [N, C, ...], got ", x.str());
  const int64_t s = x.size(1) == 0 || x.size(0) == 0 ? 0 : x.numel() / (x.size(0) * x.size(1));
  return BatchNormGeometry{x.size(0), x.size(1), s};
}

// A per-channel f32 [C] tensor on x's device; `optional`: may be undefined.
void expect_channel(const char* op, const char* name, const Tensor& t, int64_t c, const Tensor& x,
                    bool optional = false) {
  if (optional && !t.defined()) return;
  expect_defined(op, name, t);
  GRIDNN_REQUIRE(t.dtype() == DType::f32 && t.shape() == Shape{c}, op, ": ", name, " ", t.str(),
                 " should be f32 of shape [", c, "] (one value per channel)");
  expect_same_device(op, t, x);
}

// The ReLU gate's weight and bias (either may be undefined).
void expect_gate(const char* op, const BnBackwardGate& gate, int64_t c, const Tensor& x) {
  expect_channel(op, "gate weight", gate.weight, c, x, true);
  expect_channel(op, "gate bias", gate.bias, c, x, true);
}

void expect_sums(const char* op, const Tensor& sums, int64_t c, const Tensor& x) {
  expect_defined(op, "sums", sums);
  GRIDNN_REQUIRE(sums.dtype() == DType::f32 && sums.shape() == (Shape{2, c}), op, ": sums ", sums.str(),
                 " should be f32 of shape [2, ", c, "]");
  expect_same_device(op, sums, x);
}

void expect_like(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  expect_defined(op, name, t);
  GRIDNN_REQUIRE(t.shape() == x.shape() && t.dtype() == x.dtype(), op, ": ", name, " ", t.str(), " should match x ",
                 x.str());
  expect_same_device(op, t, x);
}

// A backward pass that reads x and dy per element and writes `out` (which may be dy, never x),
// with the batch statistics and the affine weight.
void expect_elementwise_backward(const char* op, const BatchNormGeometry& g, const Tensor& x, const Tensor& dy,
                                 const char* out_name, const Tensor& out, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight) {
  expect_like(op, "dy", dy, x);
  expect_like(op, out_name, out, x);
  expect_disjoint(op, x, out);
  expect_no_partial_overlap(op, dy, out);
  expect_channel(op, "mean", mean, g.c, x);
  expect_channel(op, "invstd", invstd, g.c, x);
  expect_channel(op, "weight", weight, g.c, x, true);
}

}  // namespace

void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, Tensor& sums) {
  const char* op = "batchnorm_channel_sums";
  BatchNormGeometry g = geometry_of(op, x);
  expect_channel(op, "shift", shift, g.c, x, true);
  expect_sums(op, sums, g.c, x);
  GRIDNN_BACKEND_CALL(x.device(), batchnorm_channel_sums, x, shift, g, sums);
}

void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean, Tensor& var) {
  const char* op = "batchnorm_moments";
  expect_defined(op, "sums", sums);
  GRIDNN_REQUIRE(sums.rank() == 2 && sums.size(0) == 2, op, ": sums ", sums.str(), " should be [2, C]");
  const int64_t c = sums.size(1);
  expect_sums(op, sums, c, sums);
  expect_channel(op, "shift", shift, c, sums, true);
  expect_channel(op, "mean", mean, c, sums);
  expect_channel(op, "var", var, c, sums, true);
  GRIDNN_REQUIRE(count >= 1, op, ": count must be >= 1, got ", count);
  GRIDNN_BACKEND_CALL(sums.device(), batchnorm_moments, sums, shift, count, mean, var);
}

void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd) {
  const char* op = "batchnorm_invstd";
  expect_defined(op, "var", var);
  GRIDNN_REQUIRE(var.rank() == 1, op, ": var ", var.str(), " should be [C]");
  expect_channel(op, "var", var, var.size(0), var);
  expect_channel(op, "invstd", invstd, var.size(0), var);
  GRIDNN_REQUIRE(eps > 0, op, ": eps must be > 0, got ", eps);
  GRIDNN_BACKEND_CALL(var.device(), batchnorm_invstd, var, eps, invstd);
}

void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked) {
  const char* op = "batchnorm_update_running";
  expect_defined(op, "mean", mean);
  GRIDNN_REQUIRE(mean.rank() == 1, op, ": mean ", mean.str(), " should be [C]");
  const int64_t c = mean.size(0);
  expect_channel(op, "mean", mean, c, mean);
  expect_channel(op, "var", var, c, mean);
  expect_channel(op, "running_mean", running_mean, c, mean);
  expect_channel(op, "running_var", running_var, c, mean);
  if (num_batches_tracked.defined()) {
    GRIDNN_REQUIRE(num_batches_tracked.dtype() == DType::i64 && num_batches_tracked.numel() == 1, op,
                   ": num_batches_tracked ", num_batches_tracked.str(), " should be one i64 value");
    expect_same_device(op, num_batches_tracked, mean);
  }
  GRIDNN_REQUIRE(count > 1, op, ": the unbiased variance needs more than 1 value per channel, got ", count);
  GRIDNN_BACKEND_CALL(mean.device(), batchnorm_update_running, mean, var, count, momentum, running_mean, running_var,
                      num_batches_tracked);
}

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& bias, Tensor& y, BnActivation activation) {
  const char* op = "batchnorm_normalize";
  BatchNormGeometry g = geometry_of(op, x);
  expect_channel(op, "mean", mean, g.c, x);
  expect_channel(op, "invstd", invstd, g.c, x);
  expect_channel(op, "weight", weight, g.c, x, true);
  expect_channel(op, "bias", bias, g.c, x, true);
  expect_like(op, "y", y, x);
  expect_no_partial_overlap(op, x, y);
  GRIDNN_BACKEND_CALL(x.device(), batchnorm_normalize, x, mean, invstd, weight, bias, activation, g, y);
}

void batchnorm_relu_gate(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, Tensor& gated) {
  const char* op = "batchnorm_relu_gate";
  BatchNormGeometry g = geometry_of(op, x);
  expect_elementwise_backward(op, g, x, dy, "gated", gated, mean, invstd, weight);
  expect_channel(op, "bias", bias, g.c, x, true);
  GRIDNN_BACKEND_CALL(x.device(), batchnorm_relu_gate, x, dy, mean, invstd, weight, bias, g, gated);
}

void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd, Tensor& sums,
                             const BnBackwardGate& gate) {
  const char* op = "batchnorm_backward_sums";
  BatchNormGeometry g = geometry_of(op, x);
  expect_like(op, "dy", dy, x);
  expect_channel(op, "mean", mean, g.c, x);
  expect_channel(op, "invstd", invstd, g.c, x);
  expect_sums(op, sums, g.c, x);
  expect_gate(op, gate, g.c, x);
  GRIDNN_BACKEND_CALL(x.device(), batchnorm_backward_sums, x, dy, mean, invstd, gate, g, sums);
}

void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& sums, int64_t count, bool training, Tensor& dx,
                              const BnBackwardGate& gate) {
  const char* op = "batchnorm_backward_input";
  BatchNormGeometry g = geometry_of(op, x);
  expect_gate(op, gate, g.c, x);
  expect_elementwise_backward(op, g, x, dy, "dx", dx, mean, invstd, weight);
  if (training) {
    expect_sums(op, sums, g.c, x);
    GRIDNN_REQUIRE(count >= 1, op, ": count must be >= 1 in training, got ", count);
  }
  GRIDNN_BACKEND_CALL(x.device(), batchnorm_backward_input, x, dy, mean, invstd, weight, sums, count, training, gate, g,
                      dx);
}

}  // namespace gridnn::ops
