// Batch normalization, split into steps so a distributed layer can all-reduce the
// per-channel sums between them (docs/design.md §3, §4). x is [N, C, ...] (rank >= 2); every
// per-channel tensor (shift, mean, var, invstd, weight, bias, running stats) is f32 [C];
// every sums tensor is f32 [2, C]. x, dy, y, dx: f32, f16 or bf16 (f32 arithmetic).
//
// Training forward (what nn::BatchNorm3d does; * marks where a distributed layer
// all-reduces the sums over the stage and uses the global count):
//   batchnorm_channel_sums(x, {}, sums)*         -> sums[0] = sum(x)
//   batchnorm_moments(sums, {}, count, mean, {})   mean
//   batchnorm_channel_sums(x, mean, sums)*       -> sum(x - mean), sum((x - mean)^2)
//   batchnorm_moments(sums, mean, count, mean, var); batchnorm_invstd(var, eps, invstd)
//   batchnorm_update_running(...); batchnorm_normalize(x, mean, invstd, weight, bias, y)
// (a two-pass variance: exact where E[x^2] - mean^2 would cancel; a caller that wants one
// all-reduce can instead pass a replicated shift such as running_mean to the first call.)
// Evaluation forward: mean = running_mean, batchnorm_invstd(running_var, eps, invstd),
// batchnorm_normalize.
// Backward: batchnorm_backward_sums(x, dy, mean, invstd, sums)* -> sum(dy), sum(dy * xhat);
// weight.grad += sums[1], bias.grad += sums[0]; batchnorm_backward_input(...) -> dx. Fused
// with the ReLU after it, both read dy through the ReLU's gate (BnBackwardGate).
// All sums are accumulated in double in a fixed order (kernels/batchnorm_bodies.h).
#pragma once

#include "core/tensor.h"
#include "kernels/batchnorm_bodies.h"

namespace gridnn::kernels {
// What the backward steps read as dy: the gradient of the batch norm's output (activation
// none), or of the ReLU fused after it (relu: dy where batchnorm_normalize(x, mean, invstd,
// weight, bias) > 0, else 0, the bits batchnorm_relu_gate writes, gated element by element as
// it is read, so no gated copy is written and read back). weight, bias: the layer's (either
// may be undefined: 1 and 0).
struct BnBackwardGate {
  BnActivation activation = BnActivation::none;
  Tensor weight, bias;
};
}  // namespace gridnn::kernels

namespace gridnn::ops {

// sums[0][c] = sum over n and positions of (x - shift[c]), sums[1][c] = of (x - shift[c])^2.
// shift may be undefined (zero).
void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, Tensor& sums);
// mean = shift + sums[0]/count; var (may be undefined) = sums[1]/count - (sums[0]/count)^2,
// the biased variance. mean may be the same tensor as shift.
void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean, Tensor& var);
// invstd = 1 / sqrt(var + eps).
void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd);
// running_mean/var = (1 - momentum) * running + momentum * (mean, var * count / (count - 1));
// num_batches_tracked (i64 scalar, may be undefined) += 1. count must be > 1.
void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked);
using kernels::BnActivation;
using kernels::BnBackwardGate;

// y = (x - mean) * invstd * weight + bias, then `activation`; weight and bias may be
// undefined (1 and 0). y may be x.
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& bias, Tensor& y, BnActivation activation = BnActivation::none);
// The backward of the ReLU fused after batch norm: gated = dy where
// batchnorm_normalize(x, ...) > 0, else 0 (kernels/batchnorm_bodies.h). gated may be dy.
void batchnorm_relu_gate(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, Tensor& gated);
// sums[0] = sum(dy), sums[1] = sum(dy * xhat) per channel, xhat = (x - mean) * invstd; dy
// through `gate`.
void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd, Tensor& sums,
                             const BnBackwardGate& gate = {});
// dx (overwritten; may be dy). training: the batch-statistics gradient, using the backward
// sums over `count` values per channel; otherwise dx = dy * weight * invstd (sums and count
// unused); dy through `gate`.
void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& sums, int64_t count, bool training, Tensor& dx,
                              const BnBackwardGate& gate = {});

}  // namespace gridnn::ops

// Backend entry points, called after the checks. Optional tensors may arrive undefined;
// the backends hand the bodies null pointers for them.
namespace gridnn::kernels::cpu {
void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, BatchNormGeometry g, Tensor& sums);
void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                             const BnBackwardGate& gate, BatchNormGeometry g, Tensor& sums);
void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean, Tensor& var);
void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd);
void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked);
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& bias, BnActivation activation, BatchNormGeometry g, Tensor& y);
void batchnorm_relu_gate(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, BatchNormGeometry g, Tensor& gated);
void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& sums, int64_t count, bool training,
                              const BnBackwardGate& gate, BatchNormGeometry g, Tensor& dx);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, BatchNormGeometry g, Tensor& sums);
void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                             const BnBackwardGate& gate, BatchNormGeometry g, Tensor& sums);
void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean, Tensor& var);
void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd);
void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked);
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& bias, BnActivation activation, BatchNormGeometry g, Tensor& y);
void batchnorm_relu_gate(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, BatchNormGeometry g, Tensor& gated);
void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& sums, int64_t count, bool training,
                              const BnBackwardGate& gate, BatchNormGeometry g, Tensor& dx);
}  // namespace gridnn::kernels::cuda
