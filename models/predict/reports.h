// What the first rank writes after prediction (predict.h): the predictions table, and for
// labelled scans their scores (metrics, confusion matrix, ROC curve).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/predict/scans.h"
#include "models/run/metrics.h"

namespace gridnn::predict {

// The CSV: path, prob_<class>..., predicted, label, error — one row per scan in input order.
// errors[i] is empty for a scan that was read; `logits` [read scans, classes] holds theirs
// in input order. A scan that could not be read has only its path, label and error.
std::string predictions_csv(const std::vector<ScanEntry>& scans, const std::vector<std::string>& errors,
                            const Tensor& logits);

struct Scores {
  run::Metrics metrics;
  std::vector<std::vector<int64_t>> confusion;  // [label][predicted]
};
// The scores of logits [n, classes] against labels [n] (i64).
Scores score(const Tensor& logits, const Tensor& labels);

// Beside the CSV `out` (<out stem>_...): the metrics JSON (with the confusion matrix and the
// count of scans that failed), and for two classes the ROC curve of class 1 as CSV and PNG
// when both classes are among the labels (else a note on `progress`, which may be null).
// Returns the files written.
std::vector<std::string> write_scores(const std::string& out, const Scores& scores, int64_t failed,
                                      const Tensor& logits, const Tensor& labels, std::FILE* progress);

}  // namespace gridnn::predict
