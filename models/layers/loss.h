// Softmax cross-entropy loss: the mean over the batch of -log softmax(logits)[label],
// with a stable log-sum-exp (kernels/softmax.h).
//
//   nn::SoftmaxCrossEntropy loss;
//   loss.compute(logits, labels);             // logits f32 [N, classes], labels i64 [N]
//   Tensor sum = loss.sum();                  // [1] on the logits' device, nothing read back
//   Tensor dlogits = loss.backward();         // (softmax - onehot) / N
//   float mean = loss.forward(logits, labels);  // compute, then the mean read to the host
//
// The distributed trainer passes the global batch B to backward (dlogits =
// (softmax - onehot) / B, docs/design.md §4) and all-reduces sum() over col_comm. A training
// step on a GPU reads nothing back (docs/design.md §2): it calls compute(), and the labels,
// uploaded with the batch, are checked on the host before (check_labels).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace gridnn::nn {

// Throws gridnn::Error naming `where`, the sample and the class count when a label of the
// host tensor `labels` (i64 [N]) is outside [0, classes).
void check_labels(const Tensor& labels, int64_t classes, const std::string& where);

class SoftmaxCrossEntropy {
 public:
  // The per-row losses and their sum on the logits' device; keeps the softmax for backward.
  // Host labels are checked (a label outside [0, classes) is a gridnn::Error naming it);
  // device labels are not read back: an out-of-range one gives a NaN loss.
  void compute(const Tensor& logits, const Tensor& labels);
  // compute(), then the mean loss over the N rows, read to the host (one float).
  float forward(const Tensor& logits, const Tensor& labels);
  // dL/dlogits = (softmax - onehot(labels)) / divisor; divisor 0 means N (the local batch).
  Tensor backward(int64_t divisor = 0) const;

  // Sum (not mean) of the per-sample losses of the last compute: f32 [1] on the device.
  const Tensor& sum() const { return sum_; }
  // The same, read to the host.
  double loss_sum() const;

 private:
  Tensor probs_, labels_, sum_;
};

}  // namespace gridnn::nn
