// Softmax and softmax cross-entropy bodies along the last dimension of a [rows, cols]
// view, written once for host and device (docs/design.md §3).
//
// Every row is reduced in the same fixed order on both backends: kSoftmaxLanes lanes each
// fold a strided subset of the row (lane l takes columns l, l + 32, ...), then the lanes
// are combined by a pairwise tree (widths 16, 8, 4, 2, 1: lane l takes lane l + width).
// The CUDA backend runs one warp per row (lane = thread; the tree is a butterfly of
// __shfl_xor_sync, which gives every lane lane 0's value because a + b == b + a in float);
// the CPU backend runs the lanes in a loop. No atomics: results are deterministic.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/hd.h"

namespace gridnn::kernels {

constexpr int kSoftmaxLanes = 32;  // one warp per row on the GPU

struct SoftmaxShape {
  int64_t rows, cols;
};

namespace body {

GRIDNN_HD GRIDNN_INLINE float softmax_max(float a, float b) { return (a != a || a >= b) ? a : b; }
GRIDNN_HD GRIDNN_INLINE float softmax_sum(float a, float b) { return a + b; }

// Lane partials of one row. -inf is the identity of max; an all -inf row gives NaN (as
// PyTorch does).
template <class T>
GRIDNN_HD GRIDNN_INLINE float softmax_lane_max(const T* row, int64_t cols, int lane) {
  float m = bits_float(0xff800000u);
  for (int64_t j = lane; j < cols; j += kSoftmaxLanes) m = softmax_max(m, to_float(row[j]));
  return m;
}
template <class T>
GRIDNN_HD GRIDNN_INLINE float softmax_lane_expsum(const T* row, int64_t cols, int lane, float m) {
  float s = 0.0f;
  for (int64_t j = lane; j < cols; j += kSoftmaxLanes) s += expf(to_float(row[j]) - m);
  return s;
}
// y = exp(x - m) / s for this lane's columns (in place allowed: each column is read, then
// written, by the same lane).
template <class T>
GRIDNN_HD GRIDNN_INLINE void softmax_lane_write(const T* row, T* out, int64_t cols, int lane, float m, float s) {
  for (int64_t j = lane; j < cols; j += kSoftmaxLanes) out[j] = from_float<T>(expf(to_float(row[j]) - m) / s);
}
// sum over this lane's columns of dy * y.
template <class T>
GRIDNN_HD GRIDNN_INLINE float softmax_lane_dot(const T* y, const T* dy, int64_t cols, int lane) {
  float s = 0.0f;
  for (int64_t j = lane; j < cols; j += kSoftmaxLanes) s += to_float(dy[j]) * to_float(y[j]);
  return s;
}
// dx = y * (dy - dot) for this lane's columns (dx may be dy or y).
template <class T>
GRIDNN_HD GRIDNN_INLINE void softmax_lane_backward(const T* y, const T* dy, T* dx, int64_t cols, int lane, float dot) {
  for (int64_t j = lane; j < cols; j += kSoftmaxLanes) dx[j] = from_float<T>(to_float(y[j]) * (to_float(dy[j]) - dot));
}

// The tree over kSoftmaxLanes partials, as the CPU runs it; the GPU's butterfly gives the
// same value.
template <class Combine>
GRIDNN_HD GRIDNN_INLINE float softmax_tree(float* partial, Combine combine) {
  for (int width = kSoftmaxLanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) partial[lane] = combine(partial[lane], partial[lane + width]);
  return partial[0];
}

// Cross-entropy of one row after its max m and exp-sum s are known: log-sum-exp minus
// the label's logit. NaN for a label outside [0, cols) (the op checks host labels first;
// device labels are not read back).
GRIDNN_HD GRIDNN_INLINE float cross_entropy_row_loss(const float* row, int64_t cols, int64_t label, float m, float s) {
  if (label < 0 || label >= cols) return bits_float(0x7fc00000u);
  return (m + logf(s)) - row[label];
}

// dlogits[i, j] = (p[i, j] - [j == label_i]) * scale, element e = i * cols + j.
GRIDNN_HD GRIDNN_INLINE float cross_entropy_grad_at(const float* probs, const int64_t* labels, int64_t cols,
                                                    float scale, int64_t e) {
  const int64_t i = e / cols, j = e % cols;
  const float onehot = labels[i] == j ? 1.0f : 0.0f;
  return (probs[e] - onehot) * scale;
}

}  // namespace body
}  // namespace gridnn::kernels
