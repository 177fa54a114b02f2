// Argument checks of kernels/softmax.h and the dispatch to the CPU or CUDA backend.
#include "kernels/softmax.h"

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {
SoftmaxShape rows_of(const char* op, const Tensor& x) {
  GRIDNN_REQUIRE(x.rank() >= 1, op, ": needs at least one dimension, got ", x.str());
  const int64_t cols = x.size(x.rank() - 1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}
}  // namespace

void softmax_forward(const Tensor& x, Tensor& y) {
  expect_elementwise("softmax_forward", x, y);
  expect_no_partial_overlap("softmax_forward", x, y);
  const SoftmaxShape s = rows_of("softmax_forward", x);
  if (s.rows == 0 || s.cols == 0) return;
  GRIDNN_BACKEND_CALL(x.device(), softmax_forward, x, y, s);
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  expect_elementwise("softmax_backward", y, dy);
  expect_elementwise("softmax_backward", y, dx);
  expect_no_partial_overlap("softmax_backward", y, dx);
  expect_no_partial_overlap("softmax_backward", dy, dx);
  const SoftmaxShape s = rows_of("softmax_backward", y);
  if (s.rows == 0 || s.cols == 0) return;
  GRIDNN_BACKEND_CALL(y.device(), softmax_backward, y, dy, dx, s);
}

namespace {
SoftmaxShape check_cross_entropy(const char* op, const Tensor& logits, const Tensor& labels) {
  expect_defined(op, "logits", logits);
  expect_defined(op, "labels", labels);
  GRIDNN_REQUIRE(logits.rank() == 2 && logits.dtype() == DType::f32, op, ": logits must be f32 [N, classes], got ",
                 logits.str());
  GRIDNN_REQUIRE(labels.rank() == 1 && labels.dtype() == DType::i64 && labels.size(0) == logits.size(0), op,
                 ": labels must be i64 [", logits.size(0), "] (one per row of logits ", logits.str(), "), got ",
                 labels.str());
  expect_same_device(op, logits, labels);
  GRIDNN_REQUIRE(logits.size(1) > 0, op, ": logits ", logits.str(), " have no classes");
  return {logits.size(0), logits.size(1)};
}
}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& row_loss) {
  const char* op = "cross_entropy_forward";
  const SoftmaxShape s = check_cross_entropy(op, logits, labels);
  expect_elementwise(op, logits, probs);
  expect_disjoint(op, logits, probs);  // the loss reads a logit after other lanes wrote probs
  GRIDNN_REQUIRE(row_loss.defined() && row_loss.dtype() == DType::f32 && row_loss.numel() == s.rows, op,
                 ": row_loss must be f32 with ", s.rows, " elements, got ",
                 row_loss.defined() ? row_loss.str() : "undefined");
  expect_same_device(op, logits, row_loss);
  expect_disjoint(op, logits, row_loss);
  expect_disjoint(op, probs, row_loss);
  // Host labels are checked here. Device labels are not read back (a step reads nothing from
  // the GPU, docs/design.md §2): their owner checks them before the upload, and an
  // out-of-range one gives a NaN row loss (softmax_bodies.h) and no read outside the row.
  if (labels.device().is_cpu()) {
    const int64_t* host_labels = labels.data<int64_t>();
    for (int64_t i = 0; i < s.rows; ++i)
      GRIDNN_REQUIRE(host_labels[i] >= 0 && host_labels[i] < s.cols, op, ": label ", host_labels[i], " of sample ", i,
                     " is out of range for ", s.cols, " classes (logits ", logits.str(), "); labels must be in [0, ",
                     s.cols, ")");
  }
  if (s.rows == 0) return;
  GRIDNN_BACKEND_CALL(logits.device(), cross_entropy_forward, logits, labels, probs, row_loss, s);
}

void cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const SoftmaxShape s = check_cross_entropy(op, probs, labels);
  expect_elementwise(op, probs, dlogits);
  expect_no_partial_overlap(op, probs, dlogits);
  if (s.rows == 0) return;
  GRIDNN_BACKEND_CALL(probs.device(), cross_entropy_backward, probs, labels, scale, dlogits, s);
}

}  // namespace gridnn::ops
