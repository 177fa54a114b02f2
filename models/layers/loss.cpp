// nn::SoftmaxCrossEntropy: per-row losses and probabilities in one kernel, the batch sum
// by a fixed-order reduction (kernels/reduce.h).
#include "models/layers/loss.h"

#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "models/module.h"

namespace gridnn::nn {

float SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
  const char* layer = "SoftmaxCrossEntropy";
  require_layer(logits.defined() && logits.rank() == 2 && logits.size(1) > 0, layer,
                "expects logits [N, classes], got " + (logits.defined() ? logits.str() : std::string("undefined")));
  require_layer(labels.defined() && labels.rank() == 1 && labels.size(0) == logits.size(0) &&
                    labels.dtype() == DType::i64,
                layer,
                "expects i64 labels [" + std::to_string(logits.size(0)) + "] for logits " + logits.str() +
                    ", got " + (labels.defined() ? labels.str() : std::string("undefined")));
  require_layer(logits.size(0) > 0, layer, "empty batch: logits " + logits.str());
  Tensor probs = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  Tensor row_loss = Tensor::empty({logits.size(0)}, DType::f32, logits.device());
  try {
    ops::cross_entropy_forward(logits, labels, probs, row_loss);
  } catch (const Error& e) {
    throw Error(std::string(layer) + ": " + e.what());
  }
  probs_ = probs;
  labels_ = labels;
  loss_sum_ = double(ops::sum_all(row_loss).to_vector<float>()[0]);
  return float(loss_sum_ / double(logits.size(0)));
}

Tensor SoftmaxCrossEntropy::backward(int64_t divisor) const {
  require_layer(probs_.defined(), "SoftmaxCrossEntropy", "backward called before forward");
  require_layer(divisor >= 0, "SoftmaxCrossEntropy",
                "the divisor (the global batch size) must be > 0, got " + std::to_string(divisor));
  const int64_t d = divisor == 0 ? probs_.size(0) : divisor;
  Tensor dlogits = Tensor::empty(probs_.shape(), probs_.dtype(), probs_.device());
  ops::cross_entropy_backward(probs_, labels_, 1.0f / float(d), dlogits);
  return dlogits;
}

}  // namespace gridnn::nn
