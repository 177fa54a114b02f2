// Softmax cross-entropy loss: the mean over the batch of -log softmax(logits)[label],
// with a stable log-sum-exp (kernels/softmax.h).
//
//   nn::SoftmaxCrossEntropy loss;
//   float l = loss.forward(logits, labels);   // logits f32 [N, classes], labels i64 [N]
//   Tensor dlogits = loss.backward();         // (softmax - onehot) / N
//
// The distributed trainer passes the global batch B to backward (dlogits =
// (softmax - onehot) / B, docs/design.md §4) and all-reduces loss_sum() over col_comm.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gridnn::nn {

class SoftmaxCrossEntropy {
 public:
  // The mean loss over the N rows (copied to the host: one float). Keeps the softmax for
  // backward. A label outside [0, classes) is a gridnn::Error naming it.
  float forward(const Tensor& logits, const Tensor& labels);
  // dL/dlogits = (softmax - onehot(labels)) / divisor; divisor 0 means N (the local batch).
  Tensor backward(int64_t divisor = 0) const;

  // Sum (not mean) of the per-sample losses of the last forward.
  double loss_sum() const { return loss_sum_; }

 private:
  Tensor probs_, labels_;
  double loss_sum_ = 0;
};

}  // namespace gridnn::nn
