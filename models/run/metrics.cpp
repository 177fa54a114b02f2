// Metrics: softmax probabilities on the host, in double.
#include "models/run/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace gridnn::run {

void MetricsAccumulator::add(const Tensor& logits, const Tensor& labels, double loss_sum) {
  GRIDNN_REQUIRE(logits.rank() == 2 && labels.rank() == 1 && labels.size(0) == logits.size(0), "metrics: logits ",
                 logits.str(), " and labels ", labels.str(), " do not match");
  const int64_t rows = logits.size(0), classes = logits.size(1);
  GRIDNN_REQUIRE(classes_ == 0 || classes_ == classes, "metrics: class count changed");
  classes_ = classes;
  const std::vector<float> z = logits.to_vector<float>();
  const std::vector<int64_t> y = labels.to_vector<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = z.data() + r * classes;
    const int64_t best = std::max_element(row, row + classes) - row;
    correct_ += best == y[size_t(r)];
    predicted_.push_back(best);
    label_.push_back(y[size_t(r)]);
    if (classes == 2) score_.push_back(positive_score(row[0], row[1]));
  }
  loss_sum_ += loss_sum;
}

Metrics MetricsAccumulator::result() const {
  Metrics m;
  m.samples = int64_t(label_.size());
  if (m.samples == 0) return m;
  m.loss = loss_sum_ / double(m.samples);
  m.accuracy = double(correct_) / double(m.samples);
  if (classes_ == 2) {
    m.binary = true;
    int64_t tp = 0, fn = 0, tn = 0, fp = 0;
    for (size_t i = 0; i < label_.size(); ++i) {
      if (label_[i] == 1)
        (predicted_[i] == 1 ? tp : fn)++;
      else
        (predicted_[i] == 0 ? tn : fp)++;
    }
    m.sensitivity = tp + fn ? double(tp) / double(tp + fn) : 0.0;
    m.specificity = tn + fp ? double(tn) / double(tn + fp) : 0.0;
    m.auc = roc_auc(score_, label_);
  }
  return m;
}

double roc_auc(const std::vector<double>& score, const std::vector<int64_t>& label) {
  // Rank-sum: AUC = (sum of positive ranks - P (P + 1) / 2) / (P N), average ranks for ties.
  // A NaN score (a diverged network's logits) has no rank: the AUC is undefined.
  if (std::any_of(score.begin(), score.end(), [](double s) { return std::isnan(s); }))
    return std::numeric_limits<double>::quiet_NaN();
  const size_t n = score.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && score[order[j]] == score[order[i]]) ++j;
    const double rank = 0.5 * double(i + 1 + j);  // average of ranks i+1 .. j
    for (size_t k = i; k < j; ++k)
      if (label[order[k]] == 1) positive_rank_sum += rank, ++positives;
    i = j;
  }
  const int64_t negatives = int64_t(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_rank_sum - 0.5 * double(positives) * double(positives + 1)) /
         (double(positives) * double(negatives));
}

double positive_score(float logit0, float logit1) { return 1.0 / (1.0 + std::exp(double(logit0) - double(logit1))); }

nlohmann::ordered_json metrics_json(const Metrics& m) {
  nlohmann::ordered_json j = {{"samples", m.samples}, {"loss", m.loss}, {"accuracy", m.accuracy}};
  if (m.binary) {
    j["sensitivity"] = m.sensitivity;
    j["specificity"] = m.specificity;
    j["auc"] = m.auc;
  }
  return j;
}

std::string metrics_text(const Metrics& m) {
  char text[256];
  int n = std::snprintf(text, sizeof text, "loss %.4f  accuracy %.4f (%lld samples)", m.loss, m.accuracy,
                        static_cast<long long>(m.samples));
  if (m.binary)
    std::snprintf(text + n, sizeof text - size_t(n), "  sensitivity %.4f  specificity %.4f  AUC %.4f", m.sensitivity,
                  m.specificity, m.auc);
  return text;
}

}  // namespace gridnn::run
