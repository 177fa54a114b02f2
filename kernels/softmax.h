// Softmax along the last dimension, forward and backward, and the softmax cross-entropy
// used by the loss layer. A tensor of any rank is viewed as [rows, cols] with cols its
// last dimension. Numerically stable (the row max is subtracted before exp) and
// deterministic (fixed reduction order, kernels/softmax_bodies.h).
#pragma once

#include "core/tensor.h"
#include "kernels/softmax_bodies.h"

namespace gridnn::ops {

// y = exp(x - max) / sum(exp(x - max)) per row. y may be x (in place). f32, f16, bf16.
void softmax_forward(const Tensor& x, Tensor& y);
// dx = y * (dy - sum(dy * y)) per row, y the forward output. dx may be dy (in place).
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

// Softmax cross-entropy of logits [N, classes] (f32) with labels [N] (i64):
// probs = softmax(logits), row_loss[i] = logsumexp(logits[i]) - logits[i, label_i].
// Host labels outside [0, classes) are an error naming the label. Device labels are not read
// back (a step reads nothing from the GPU): an out-of-range one gives that row a NaN loss.
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& row_loss);
// dlogits = (probs - onehot(labels)) * scale.
void cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale, Tensor& dlogits);

}  // namespace gridnn::ops

namespace gridnn::kernels::cpu {
void softmax_forward(const Tensor& x, Tensor& y, SoftmaxShape s);
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, SoftmaxShape s);
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& row_loss, SoftmaxShape s);
void cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale, Tensor& dlogits, SoftmaxShape s);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void softmax_forward(const Tensor& x, Tensor& y, SoftmaxShape s);
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, SoftmaxShape s);
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& row_loss, SoftmaxShape s);
void cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale, Tensor& dlogits, SoftmaxShape s);
}  // namespace gridnn::kernels::cuda
