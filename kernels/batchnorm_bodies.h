// Batch-normalization bodies, written once for host and device (docs/design.md §3).
//
// The input is viewed as [n, c, s] (s = D*H*W). Per-channel sums are accumulated in
// DOUBLE in a fixed order: L = reduce_lanes(s) lanes per channel, lane l taking, for each
// sample in turn, the positions l, l + L, ... of that sample's plane; then a pairwise tree
// over the lanes (the order of kernels/reduce_bodies.h). The CUDA backend runs one thread
// per lane; the CPU backend interleaves the lanes in one pass over each plane, which keeps
// every lane's additions in the same order, so the sums are deterministic and the same on
// both backends (no FMA contraction on either: -ffp-contract=off / -fmad=false).
//
// Why double: E[x^2] - mean^2 in float loses most digits when |mean| >> std. Two things
// prevent that here: the sums are taken around a per-channel shift (the layer first takes
// the mean, then the sums of (x - mean) and (x - mean)^2: a two-pass variance), and each
// rank's partial sums are accumulated in double before being rounded once to f32 (the
// all-reducible [2, C] tensor) — a float accumulator would lose ~log2(count) bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/hd.h"
#include "kernels/reduce_bodies.h"

namespace gridnn::kernels {

// x viewed as [n, c, s].
struct BatchNormGeometry {
  int64_t n, c, s;
};

namespace body {

// One element's contribution to the statistics sums: a += v - shift, b += (v - shift)^2.
GRIDNN_HD GRIDNN_INLINE void bn_stat_step(double& a, double& b, float v, double shift) {
  const double d = double(v) - shift;
  a += d;
  b += d * d;
}

// One element's contribution to the backward sums: a += dy, b += dy * (x - mean) (the
// caller scales b by invstd to get sum(dy * xhat)).
GRIDNN_HD GRIDNN_INLINE void bn_grad_step(double& a, double& b, float x, float dy, double mean) {
  a += double(dy);
  b += double(dy) * (double(x) - mean);
}

// Lane `lane` of `lanes` of channel c: its partial statistics sums (the CUDA thread's loop;
// the CPU loop visits the same elements per lane in the same order).
template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_stat_lane(const T* x, BatchNormGeometry g, int64_t c, double shift,
                                          int lane, int lanes, double* a, double* b) {
  double sa = 0.0, sb = 0.0;
  for (int64_t n = 0; n < g.n; ++n) {
    const T* plane = x + (n * g.c + c) * g.s;
    for (int64_t k = lane; k < g.s; k += lanes) bn_stat_step(sa, sb, to_float(plane[k]), shift);
  }
  *a = sa;
  *b = sb;
}

template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_grad_lane(const T* x, const T* dy, BatchNormGeometry g, int64_t c,
                                          double mean, int lane, int lanes, double* a, double* b) {
  double sa = 0.0, sb = 0.0;
  for (int64_t n = 0; n < g.n; ++n) {
    const int64_t base = (n * g.c + c) * g.s;
    for (int64_t k = lane; k < g.s; k += lanes)
      bn_grad_step(sa, sb, to_float(x[base + k]), to_float(dy[base + k]), mean);
  }
  *a = sa;
  *b = sb;
}

// One step of the pairwise tree over lanes: lanes [0, width) take lanes [width, 2 width).
GRIDNN_HD GRIDNN_INLINE void bn_tree_step(double* a, double* b, int lane, int width) {
  a[lane] += a[lane + width];
  b[lane] += b[lane + width];
}

// ---- per-channel steps (c in [0, C)) ---------------------------------------------------

// From the sums around `shift` over `count` values: mean = shift + s1/count and the biased
// variance s2/count - (s1/count)^2 (the correction term is ~0 when shift is the mean).
GRIDNN_HD GRIDNN_INLINE void bn_moments_at(int64_t c, int64_t channels, const float* sums,
                                           const float* shift, int64_t count, float* mean,
                                           float* var) {
  const double m1 = double(sums[c]) / double(count);
  const double v = double(sums[channels + c]) / double(count) - m1 * m1;
  mean[c] = float((shift ? double(shift[c]) : 0.0) + m1);
  if (var) var[c] = float(v > 0.0 ? v : 0.0);
}

GRIDNN_HD GRIDNN_INLINE void bn_invstd_at(int64_t c, const float* var, double eps, float* invstd) {
  invstd[c] = float(1.0 / sqrt(double(var[c]) + eps));
}

// PyTorch's update: running = (1 - momentum) * running + momentum * batch, with the
// unbiased variance var * count / (count - 1). Computed in double, rounded once.
GRIDNN_HD GRIDNN_INLINE void bn_update_running_at(int64_t c, const float* mean, const float* var,
                                                  int64_t count, double momentum,
                                                  float* running_mean, float* running_var) {
  const double unbiased = double(var[c]) * double(count) / double(count - 1);
  running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + momentum * double(mean[c]));
  running_var[c] = float((1.0 - momentum) * double(running_var[c]) + momentum * unbiased);
}

// ---- per-element steps (i in [0, n*c*s)) -------------------------------------------------

// y = (x - mean) * invstd * weight + bias (weight 1 and bias 0 when absent).
template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_normalize_at(int64_t i, const T* x, BatchNormGeometry g,
                                             const float* mean, const float* invstd,
                                             const float* weight, const float* bias, T* y) {
  const int64_t c = (i / g.s) % g.c;
  const float xhat = (to_float(x[i]) - mean[c]) * invstd[c];
  const float w = weight ? weight[c] : 1.0f, b = bias ? bias[c] : 0.0f;
  y[i] = from_float<T>(xhat * w + b);
}

// Training (statistics of this batch): dx = w * invstd * (dy - sum(dy)/count - xhat *
// sum(dy * xhat)/count), with grad_sums = [sum(dy); sum(dy * xhat)] over the whole
// (possibly all-reduced) batch. Evaluation (fixed statistics): dx = dy * w * invstd.
template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_backward_input_at(int64_t i, const T* x, const T* dy,
                                                  BatchNormGeometry g, const float* mean,
                                                  const float* invstd, const float* weight,
                                                  const float* grad_sums, int64_t count,
                                                  bool training, T* dx) {
  const int64_t c = (i / g.s) % g.c;
  const float scale = (weight ? weight[c] : 1.0f) * invstd[c];
  const float d = to_float(dy[i]);
  if (!training) {
    dx[i] = from_float<T>(d * scale);
    return;
  }
  const float xhat = (to_float(x[i]) - mean[c]) * invstd[c];
  const float mean_dy = float(double(grad_sums[c]) / double(count));
  const float mean_dy_xhat = float(double(grad_sums[g.c + c]) / double(count));
  dx[i] = from_float<T>(scale * (d - mean_dy - xhat * mean_dy_xhat));
}

}  // namespace body
}  // namespace gridnn::kernels
