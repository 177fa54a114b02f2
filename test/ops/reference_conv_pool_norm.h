// Double-precision references of 3D convolution, pooling and batch normalization, shared by
// the op harness's cases (test/ops/cases_conv3d.cpp, cases_pool3d.cpp, cases_batchnorm.cpp)
// and the layers' own tests (test/models/layers): the textbook loops, written once,
// independent of the kernels under test. Tensors are CPU tensors of any floating dtype,
// NCDHW and contiguous; results are flat, in the same layout.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/conv3d.h"
#include "kernels/pool3d.h"

namespace gridnn::test {

// ---- convolution (cross-correlation, zero padding; taps in the padding skipped) ----------

// y = conv(x, w) (+ bias[o] when bias is defined) for x [N, C, D, H, W], w [O, C, kd, kh, kw].
std::vector<double> reference_conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                             const ops::Conv3dGeometry& g);
// dL/dx for dy [N, O, Do, Ho, Wo].
std::vector<double> reference_conv3d_backward_data(const Tensor& dy, const Tensor& w, const ops::Conv3dGeometry& g);
// dL/dw (not accumulated onto anything).
std::vector<double> reference_conv3d_backward_filter(const Tensor& x, const Tensor& dy, const ops::Conv3dGeometry& g);
// dL/dbias[o] = sum of dy[:, o].
std::vector<double> reference_conv3d_backward_bias(const Tensor& dy);

// ---- pooling (PyTorch's semantics, floor mode) ------------------------------------------

// Max: -inf padding, the first maximum in window order (d, h, w), argmax a flat index into
// the input volume. Average: the window sum divided by the full kernel volume
// (count_include_pad).
struct PoolReference {
  Shape y_shape;
  std::vector<double> y;
  std::vector<int64_t> argmax;  // max only
};
PoolReference reference_pool3d(bool max, const Tensor& x, const ops::Pool3dParams& p);
// By scatter: max sends dy to the argmax of `fwd`, average spreads dy / kernel volume over
// each window's inputs (fwd.y_shape only).
std::vector<double> reference_pool3d_backward(bool max, const Shape& x_shape, const PoolReference& fwd,
                                              const Tensor& dy, const ops::Pool3dParams& p);
// [N, C, D, H, W] -> [N, C] means, and dx = dy / (D*H*W) broadcast over each volume.
std::vector<double> reference_global_avg_pool3d(const Tensor& x);
std::vector<double> reference_global_avg_pool3d_backward(const Tensor& dy, const Shape& x_shape);

// Distinct values 0.01 apart in a shuffled order: no two elements of a window are within a
// central difference's perturbation of each other, so no argmax flips (no ties, no kinks).
Tensor distinct_values(const Shape& s, unsigned seed);

// ---- batch normalization (x [N, C, ...]; per-channel vectors of C values) ---------------

// Per-channel mean and biased variance (two passes), over count = N * (values per plane).
struct BatchNormStats {
  std::vector<double> mean, var;
  int64_t count;
};
BatchNormStats reference_batchnorm_stats(const Tensor& x);
// [sum(x - shift); sum((x - shift)^2)] per channel, 2C values (shift empty: zero).
std::vector<double> reference_batchnorm_channel_sums(const Tensor& x, const std::vector<double>& shift);
// From such sums over `count` values: mean = shift + s1 / count and the biased variance
// s2 / count - (s1 / count)^2 (clamped at 0).
BatchNormStats reference_batchnorm_moments(const std::vector<double>& sums, const std::vector<double>& shift,
                                           int64_t count);
// 1 / sqrt(var + eps).
std::vector<double> reference_batchnorm_invstd(const std::vector<double>& var, double eps);
// y = (x - mean) * invstd * weight + bias (weight, bias empty: 1 and 0).
std::vector<double> reference_batchnorm_normalize(const Tensor& x, const std::vector<double>& mean,
                                                  const std::vector<double>& invstd, const std::vector<double>& weight,
                                                  const std::vector<double>& bias);
// [sum(dy); sum(dy * xhat)] per channel, xhat = (x - mean) * invstd.
std::vector<double> reference_batchnorm_backward_sums(const Tensor& x, const Tensor& dy,
                                                      const std::vector<double>& mean,
                                                      const std::vector<double>& invstd);
// dx. training: w * invstd * (dy - sums[0][c] / count - xhat * sums[1][c] / count), the
// gradient through the batch statistics, with `sums` the backward sums over `count` values
// per channel; evaluation: dy * w * invstd (sums and count unused). weight empty: 1.
std::vector<double> reference_batchnorm_backward_input(const Tensor& x, const Tensor& dy,
                                                       const std::vector<double>& mean,
                                                       const std::vector<double>& invstd,
                                                       const std::vector<double>& weight,
                                                       const std::vector<double>& sums, int64_t count, bool training);
// PyTorch's running statistics after one training step with batch statistics `batch`:
// running = (1 - momentum) * running + momentum * (mean, var * count / (count - 1)).
void reference_batchnorm_update_running(const BatchNormStats& batch, double momentum, std::vector<double>& running_mean,
                                        std::vector<double>& running_var);

}  // namespace gridnn::test
