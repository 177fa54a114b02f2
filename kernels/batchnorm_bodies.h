// Batch-normalization bodies, written once for host and device (docs/design.md §3).
//
// The input is viewed as [n, c, s] (s = D*H*W). Per-channel sums are accumulated in DOUBLE
// in a fixed order that depends on the shape alone, never on the number of threads or blocks:
//   1. Each (n, c) plane is cut into segments of kBatchNormSegment consecutive positions, the
//      last one shorter (a plane of at most kBatchNormSegment positions is one segment).
//   2. A segment is summed in L = bn_lanes(s) lanes, lane l taking the segment's positions
//      l, l + L, ... in turn, then by a pairwise tree over the lanes (the order of
//      kernels/reduce_bodies.h).
//   3. Channel c's sum is the left fold, from 0, of its segments' sums in order of sample n,
//      and within a plane in order of position (bn_fold_channel).
// Segments are independent units of work: the CUDA backend runs one block per segment and
// folds in a second kernel; the CPU backend threads over segments, interleaving the lanes of
// one in a single contiguous pass (each lane still adds its positions in the same order), and
// folds serially. So the sums are deterministic and the same on both backends (no FMA
// contraction on either: -ffp-contract=off / -fmad=false).
//
// Why double: E[x^2] - mean^2 in float loses most digits when |mean| >> std. Two things
// prevent that here: the sums are taken around a per-channel shift (the layer first takes
// the mean, then the sums of (x - mean) and (x - mean)^2: a two-pass variance), and each
// rank's partial sums are accumulated in double before being rounded once to f32 (the
// all-reducible [2, C] tensor) — a float accumulator would lose ~log2(count) bits.
//
// The per-element steps (normalize, input gradient) split into per-channel coefficients,
// computed once per plane on the CPU, and a per-element expression; both backends evaluate
// exactly the same float expression, so the results agree bit for bit.
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

// Positions per segment of the sums: big enough that the tree costs little next to the
// segment's additions, small enough that a batch of few large planes still splits into many
// independent segments (threads on the CPU, blocks on CUDA). A multiple of kReduceLanes, so
// only a plane's last segment can end in a partial block of lanes.
constexpr int64_t kBatchNormSegment = 16384;
static_assert(kBatchNormSegment % kReduceLanes == 0, "segments hold whole blocks of lanes");

// Segments per plane of s positions (0 when s is 0).
GRIDNN_HD GRIDNN_INLINE int64_t bn_segments_per_plane(int64_t s) {
  return (s + kBatchNormSegment - 1) / kBatchNormSegment;
}

// Segments of the whole input, numbered in memory order: segment (n * c + channel) *
// per_plane + k is the k-th segment of plane (n, channel).
GRIDNN_HD GRIDNN_INLINE int64_t bn_segment_count(BatchNormGeometry g) { return g.n * g.c * bn_segments_per_plane(g.s); }

// Lanes of every segment of a plane of s positions.
GRIDNN_HD GRIDNN_INLINE int bn_lanes(int64_t s) { return reduce_lanes(s < kBatchNormSegment ? s : kBatchNormSegment); }

// The flat positions [begin, end) of segment `index`, and its channel.
struct BatchNormSegment {
  int64_t begin, end, channel;
};

GRIDNN_HD GRIDNN_INLINE BatchNormSegment bn_segment(BatchNormGeometry g, int64_t index) {
  const int64_t per_plane = bn_segments_per_plane(g.s);
  const int64_t plane = index / per_plane, k = index % per_plane;
  const int64_t begin = plane * g.s + k * kBatchNormSegment, plane_end = (plane + 1) * g.s;
  return {begin, begin + kBatchNormSegment < plane_end ? begin + kBatchNormSegment : plane_end, plane % g.c};
}

// The activation a batch norm may apply to its output in the same pass: relu gives
// relu(bn(x)) (batch norm fused with the ReLU after it).
enum class BnActivation { none, relu };

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

// Lane `lane` of `lanes` of segment `seg`: its partial statistics sums (the CUDA thread's
// loop; the CPU loop visits the same positions per lane in the same order).
template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_stat_lane(const T* x, BatchNormSegment seg, double shift, int lane, int lanes,
                                          double* a, double* b) {
  double sa = 0.0, sb = 0.0;
  for (int64_t i = seg.begin + lane; i < seg.end; i += lanes) bn_stat_step(sa, sb, to_float(x[i]), shift);
  *a = sa;
  *b = sb;
}

// One step of the pairwise tree over lanes: lanes [0, width) take lanes [width, 2 width).
GRIDNN_HD GRIDNN_INLINE void bn_tree_step(double* a, double* b, int lane, int width) {
  a[lane] += a[lane + width];
  b[lane] += b[lane + width];
}

// ---- per-channel steps (c in [0, C)) ---------------------------------------------------

// Channel c's two sums: the left fold of its segments' sums (segment i's in seg_a[i] and
// seg_b[i]) in order of n, then of position within the plane.
GRIDNN_HD GRIDNN_INLINE void bn_fold_channel(const double* seg_a, const double* seg_b, BatchNormGeometry g, int64_t c,
                                             double* a, double* b) {
  const int64_t per_plane = bn_segments_per_plane(g.s);
  double sa = 0.0, sb = 0.0;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < per_plane; ++k) {
      const int64_t index = (n * g.c + c) * per_plane + k;
      sa += seg_a[index];
      sb += seg_b[index];
    }
  *a = sa;
  *b = sb;
}

// Stores channel c's sums, rounded once to f32. Statistics: sums = [a; b]. Backward
// (invstd given): b is sum(dy * (x - mean)), scaled here to sum(dy * xhat).
GRIDNN_HD GRIDNN_INLINE void bn_store_sums(int64_t c, int64_t channels, double a, double b, const float* invstd,
                                           float* sums) {
  sums[c] = float(a);
  sums[channels + c] = float(invstd ? b * double(invstd[c]) : b);
}

// From the sums around `shift` over `count` values: mean = shift + s1/count and the biased
// variance s2/count - (s1/count)^2 (the correction term is ~0 when shift is the mean).
GRIDNN_HD GRIDNN_INLINE void bn_moments_at(int64_t c, int64_t channels, const float* sums, const float* shift,
                                           int64_t count, float* mean, float* var) {
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
GRIDNN_HD GRIDNN_INLINE void bn_update_running_at(int64_t c, const float* mean, const float* var, int64_t count,
                                                  double momentum, float* running_mean, float* running_var) {
  const double unbiased = double(var[c]) * double(count) / double(count - 1);
  running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + momentum * double(mean[c]));
  running_var[c] = float((1.0 - momentum) * double(running_var[c]) + momentum * unbiased);
}

// ---- per-element steps (i in [0, n*c*s)) -------------------------------------------------
// Each splits into per-channel coefficients (hoisted out of a plane's loop on the CPU) and
// the expression of one element.

// y = (x - mean) * invstd * weight + bias (weight 1 and bias 0 when absent).
struct BnNormalizeCoeffs {
  float mean, invstd, weight, bias;
};

GRIDNN_HD GRIDNN_INLINE BnNormalizeCoeffs bn_normalize_coeffs(int64_t c, const float* mean, const float* invstd,
                                                              const float* weight, const float* bias) {
  return {mean[c], invstd[c], weight ? weight[c] : 1.0f, bias ? bias[c] : 0.0f};
}

GRIDNN_HD GRIDNN_INLINE float bn_normalize_value(float x, BnNormalizeCoeffs k) {
  const float xhat = (x - k.mean) * k.invstd;
  return xhat * k.weight + k.bias;
}

// Batch norm fused with the ReLU after it (see BnActivation): the output is normalized,
// rounded to T and then activated, and the backward gates dy by the sign of bn(x) recomputed
// from x and rounded to T as the unfused ReLU saw it, so the fused layer keeps x alone and
// its results are those of the two layers bit for bit.
GRIDNN_HD GRIDNN_INLINE float bn_activate(float v, BnActivation a) {
  return a == BnActivation::relu && v < 0.0f ? 0.0f : v;  // nn::ReLU's rule (NaN propagates)
}

template <class T>
GRIDNN_HD GRIDNN_INLINE float bn_relu_gate(float x, float dy, BnNormalizeCoeffs k) {
  // nn::ReLU's backward rule, dy where the output is > 0 else +0, as a bit mask rather than a
  // branch: the same bits, and a loop over it vectorizes.
  const bool open = to_float(from_float<T>(bn_normalize_value(x, k))) > 0.0f;
  return bits_float(float_bits(dy) & (0u - uint32_t(open)));
}

// dy as the backward of a batch norm fused with the ReLU after it reads it: gated on the
// forward's output as bn_relu_gate gates it, element by element as it is read (no gated copy
// is written first), or as it is when `gate` is null (no ReLU). The same bits as reading
// batchnorm_relu_gate's output: a gated element is dy or 0, both exact in T.
template <class T>
GRIDNN_HD GRIDNN_INLINE float bn_gated_dy(float x, float dy, const BnNormalizeCoeffs* gate) {
  return gate ? bn_relu_gate<T>(x, dy, *gate) : dy;
}

// Lane `lane` of `lanes` of segment `seg` of the backward sums, dy gated by `gate` (may be
// null; bn_gated_dy): the CUDA thread's loop, as bn_stat_lane.
template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_grad_lane(const T* x, const T* dy, BatchNormSegment seg, double mean,
                                          const BnNormalizeCoeffs* gate, int lane, int lanes, double* a, double* b) {
  double sa = 0.0, sb = 0.0;
  for (int64_t i = seg.begin + lane; i < seg.end; i += lanes) {
    const float xv = to_float(x[i]);
    bn_grad_step(sa, sb, xv, bn_gated_dy<T>(xv, to_float(dy[i]), gate), mean);
  }
  *a = sa;
  *b = sb;
}

// One output element: normalized, rounded to T, then (on the rounded value, as the unfused
// ReLU would see it) activated.
template <class T>
GRIDNN_HD GRIDNN_INLINE T bn_output(float x, BnNormalizeCoeffs k, BnActivation a) {
  const T v = from_float<T>(bn_normalize_value(x, k));
  return a == BnActivation::none ? v : from_float<T>(bn_activate(to_float(v), a));
}

template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_normalize_at(int64_t i, const T* x, BatchNormGeometry g, const float* mean,
                                             const float* invstd, const float* weight, const float* bias,
                                             BnActivation a, T* y) {
  y[i] = bn_output<T>(to_float(x[i]), bn_normalize_coeffs((i / g.s) % g.c, mean, invstd, weight, bias), a);
}

template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_relu_gate_at(int64_t i, const T* x, const T* dy, BatchNormGeometry g, const float* mean,
                                             const float* invstd, const float* weight, const float* bias, T* gated) {
  const BnNormalizeCoeffs k = bn_normalize_coeffs((i / g.s) % g.c, mean, invstd, weight, bias);
  gated[i] = from_float<T>(bn_relu_gate<T>(to_float(x[i]), to_float(dy[i]), k));
}

// Training (statistics of this batch): dx = w * invstd * (dy - sum(dy)/count - xhat *
// sum(dy * xhat)/count), with grad_sums = [sum(dy); sum(dy * xhat)] over the whole
// (possibly all-reduced) batch. Evaluation (fixed statistics): dx = dy * w * invstd (the
// sums are not read and may be null).
struct BnInputGradCoeffs {
  float mean, invstd, scale, mean_dy, mean_dy_xhat;  // scale = w * invstd
};

GRIDNN_HD GRIDNN_INLINE BnInputGradCoeffs bn_input_grad_coeffs(int64_t c, int64_t channels, const float* mean,
                                                               const float* invstd, const float* weight,
                                                               const float* grad_sums, int64_t count, bool training) {
  BnInputGradCoeffs k{mean[c], invstd[c], (weight ? weight[c] : 1.0f) * invstd[c], 0.0f, 0.0f};
  if (training) {
    k.mean_dy = float(double(grad_sums[c]) / double(count));
    k.mean_dy_xhat = float(double(grad_sums[channels + c]) / double(count));
  }
  return k;
}

GRIDNN_HD GRIDNN_INLINE float bn_input_grad_training(float x, float dy, BnInputGradCoeffs k) {
  const float xhat = (x - k.mean) * k.invstd;
  return k.scale * (dy - k.mean_dy - xhat * k.mean_dy_xhat);
}

GRIDNN_HD GRIDNN_INLINE float bn_input_grad_eval(float dy, BnInputGradCoeffs k) { return dy * k.scale; }

// dx[i]; with `relu`, dy gated on the forward's output (gate_weight, gate_bias: the layer's,
// either may be null; bn_gated_dy).
template <class T>
GRIDNN_HD GRIDNN_INLINE void bn_backward_input_at(int64_t i, const T* x, const T* dy, BatchNormGeometry g,
                                                  const float* mean, const float* invstd, const float* weight,
                                                  const float* grad_sums, int64_t count, bool training, bool relu,
                                                  const float* gate_weight, const float* gate_bias, T* dx) {
  const int64_t c = (i / g.s) % g.c;
  const BnInputGradCoeffs k = bn_input_grad_coeffs(c, g.c, mean, invstd, weight, grad_sums, count, training);
  const BnNormalizeCoeffs gate = bn_normalize_coeffs(c, mean, invstd, gate_weight, gate_bias);
  const float xv = to_float(x[i]), d = bn_gated_dy<T>(xv, to_float(dy[i]), relu ? &gate : nullptr);
  dx[i] = from_float<T>(training ? bn_input_grad_training(xv, d, k) : bn_input_grad_eval(d, k));
}

}  // namespace body
}  // namespace gridnn::kernels
