// Classification metrics over an epoch or a validation pass: mean loss and accuracy; for
// two classes also sensitivity (true-positive rate of class 1), specificity (true-negative
// rate) and the ROC AUC of the class-1 probability (Mann-Whitney, ties counted half).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gridnn::run {

struct Metrics {
  int64_t samples = 0;
  double loss = 0;  // mean
  double accuracy = 0;
  bool binary = false;  // the three below are set for two classes only
  double sensitivity = 0, specificity = 0, auc = 0;
};

class MetricsAccumulator {
 public:
  // logits [rows, classes] (any device), labels i64 [rows]; loss_sum: the summed loss of
  // these rows.
  void add(const Tensor& logits, const Tensor& labels, double loss_sum);
  Metrics result() const;
  void clear() { *this = MetricsAccumulator(); }

 private:
  int64_t classes_ = 0;
  double loss_sum_ = 0;
  int64_t correct_ = 0;
  std::vector<double> score_;  // class-1 probability (binary)
  std::vector<int64_t> label_;
  std::vector<int64_t> predicted_;
};

// "loss 0.3012  accuracy 0.9000 (40 samples)  sensitivity ...  AUC 0.9412" (one line), and
// the same as JSON fields.
std::string metrics_text(const Metrics& m);
nlohmann::ordered_json metrics_json(const Metrics& m);

// The class-1 probability of two logits, 1 / (1 + exp(z0 - z1)): the score the AUC and
// gridnn-predict's ROC rank.
double positive_score(float logit0, float logit1);

// Area under the ROC curve of `score` for the positives (label 1) against the negatives
// (label 0); 0.5 when either class is absent, NaN when a score is NaN.
double roc_auc(const std::vector<double>& score, const std::vector<int64_t>& label);

}  // namespace gridnn::run
