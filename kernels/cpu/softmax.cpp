// CPU backend of kernels/softmax.h: one row per loop iteration; inside a row the lanes of
// kernels/softmax_bodies.h run in a loop and are combined by the same tree the GPU's warp
// runs, so both backends add in the same order.
#include "kernels/softmax.h"

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {
namespace {

template <class T>
void softmax_row(const T* x, T* y, int64_t cols) {
  float partial[kSoftmaxLanes];
  for (int l = 0; l < kSoftmaxLanes; ++l) partial[l] = body::softmax_lane_max(x, cols, l);
  const float m = body::softmax_tree(partial, body::softmax_max);
  for (int l = 0; l < kSoftmaxLanes; ++l) partial[l] = body::softmax_lane_expsum(x, cols, l, m);
  const float s = body::softmax_tree(partial, body::softmax_sum);
  for (int l = 0; l < kSoftmaxLanes; ++l) body::softmax_lane_write(x, y, cols, l, m, s);
}

// The row's max and exp-sum without writing anything (cross-entropy).
void row_stats(const float* x, int64_t cols, float* m, float* s) {
  float partial[kSoftmaxLanes];
  for (int l = 0; l < kSoftmaxLanes; ++l) partial[l] = body::softmax_lane_max(x, cols, l);
  *m = body::softmax_tree(partial, body::softmax_max);
  for (int l = 0; l < kSoftmaxLanes; ++l) partial[l] = body::softmax_lane_expsum(x, cols, l, *m);
  *s = body::softmax_tree(partial, body::softmax_sum);
}

}  // namespace

void softmax_forward(const Tensor& x, Tensor& y, SoftmaxShape s) {
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "softmax_forward", [&] {
    const scalar_t* px = static_cast<const scalar_t*>(x.raw());
    scalar_t* py = static_cast<scalar_t*>(y.raw());
    parallel_for(
        s.rows, [&](int64_t r) { softmax_row(px + r * s.cols, py + r * s.cols, s.cols); }, 3 * s.cols);
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, SoftmaxShape s) {
  GRIDNN_DISPATCH_FLOATING(y.dtype(), "softmax_backward", [&] {
    const scalar_t* py = static_cast<const scalar_t*>(y.raw());
    const scalar_t* pdy = static_cast<const scalar_t*>(dy.raw());
    scalar_t* pdx = static_cast<scalar_t*>(dx.raw());
    parallel_for(
        s.rows,
        [&](int64_t r) {
          const int64_t o = r * s.cols;
          float partial[kSoftmaxLanes];
          for (int l = 0; l < kSoftmaxLanes; ++l) partial[l] = body::softmax_lane_dot(py + o, pdy + o, s.cols, l);
          const float dot = body::softmax_tree(partial, body::softmax_sum);
          for (int l = 0; l < kSoftmaxLanes; ++l) body::softmax_lane_backward(py + o, pdy + o, pdx + o, s.cols, l, dot);
        },
        2 * s.cols);
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& row_loss,
                           SoftmaxShape s) {
  const float* x = logits.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  float* p = probs.data<float>();
  float* loss = row_loss.data<float>();
  parallel_for(
      s.rows,
      [&](int64_t r) {
        const float* row = x + r * s.cols;
        float m, sum;
        row_stats(row, s.cols, &m, &sum);
        loss[r] = body::cross_entropy_row_loss(row, s.cols, lab[r], m, sum);
        for (int l = 0; l < kSoftmaxLanes; ++l) body::softmax_lane_write(row, p + r * s.cols, s.cols, l, m, sum);
      },
      3 * s.cols);
}

void cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale, Tensor& dlogits, SoftmaxShape s) {
  const float* p = probs.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  float* d = dlogits.data<float>();
  parallel_for(s.rows * s.cols, [&](int64_t e) { d[e] = body::cross_entropy_grad_at(p, lab, s.cols, scale, e); });
}

}  // namespace gridnn::kernels::cpu
