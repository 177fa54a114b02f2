// nn::SoftmaxCrossEntropy: per-row losses and probabilities in one kernel, the batch sum
// by a fixed-order reduction (kernels/reduce.h).
#include "models/layers/loss.h"

#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "models/layers/module.h"

namespace gridnn::nn {

void check_labels(const Tensor& labels, int64_t classes, const std::string& where) {
  GRIDNN_REQUIRE(labels.defined() && labels.rank() == 1 && labels.dtype() == DType::i64 && labels.device().is_cpu(),
                 where, ": labels must be i64 [N] on the host, got ",
                 labels.defined() ? labels.str() : std::string("undefined"));
  const int64_t* v = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    GRIDNN_REQUIRE(v[i] >= 0 && v[i] < classes, where, ": label ", v[i], " of sample ", i, " is out of range for ",
                   classes, " classes; labels must be in [0, ", classes, ")");
}

void SoftmaxCrossEntropy::compute(const Tensor& logits, const Tensor& labels) {
  const char* layer = "SoftmaxCrossEntropy";
  require_layer(logits.defined() && logits.rank() == 2 && logits.size(1) > 0, layer,
                "expects logits [N, classes], got " + (logits.defined() ? logits.str() : std::string("undefined")));
  require_layer(
      labels.defined() && labels.rank() == 1 && labels.size(0) == logits.size(0) && labels.dtype() == DType::i64, layer,
      "expects i64 labels [" + std::to_string(logits.size(0)) + "] for logits " + logits.str() + ", got " +
          (labels.defined() ? labels.str() : std::string("undefined")));
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
  sum_ = ops::sum_all(row_loss).reshape({1});
}

float SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
  compute(logits, labels);
  return float(loss_sum() / double(logits.size(0)));
}

double SoftmaxCrossEntropy::loss_sum() const {
  require_layer(sum_.defined(), "SoftmaxCrossEntropy", "loss_sum() called before forward");
  return double(sum_.to_vector<float>()[0]);
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
