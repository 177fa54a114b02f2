// The predictions table and the scores' files (reports.h).
#include "models/predict/reports.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "core/file_io.h"
#include "core/png.h"
#include "models/explain/roc_plot.h"
#include "models/layers/loss.h"

namespace gridnn::predict {

namespace fs = std::filesystem;

namespace {

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

// The softmax of each row of logits [rows, classes], in double.
std::vector<std::vector<double>> probabilities(const Tensor& logits) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const float* z = logits.data<float>();
  std::vector<std::vector<double>> p(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(classes)));
  for (int64_t r = 0; r < rows; ++r) {
    const double top = *std::max_element(z + r * classes, z + (r + 1) * classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += p[size_t(r)][size_t(c)] = std::exp(double(z[r * classes + c]) - top);
    for (double& v : p[size_t(r)]) v /= sum;
  }
  return p;
}

int64_t predicted_class(const Tensor& logits, int64_t row) {
  const int64_t classes = logits.size(1);
  const float* z = logits.data<float>() + row * classes;
  return std::max_element(z, z + classes) - z;
}

}  // namespace

std::string predictions_csv(const std::vector<ScanEntry>& scans, const std::vector<std::string>& errors,
                            const Tensor& logits) {
  const int64_t classes = logits.size(1);
  const auto prob = probabilities(logits);
  std::ostringstream csv;
  csv << "path";
  for (int64_t c = 0; c < classes; ++c) csv << ",prob_" << c;
  csv << ",predicted,label,error\n";
  char number[32];
  for (size_t i = 0, g = 0; i < scans.size(); ++i) {
    const std::string label = scans[i].label >= 0 ? std::to_string(scans[i].label) : "";
    csv << csv_field(scans[i].path);
    if (!errors[i].empty()) {
      for (int64_t c = 0; c < classes; ++c) csv << ",";
      csv << ",," << label << "," << csv_field(errors[i]) << "\n";
      continue;
    }
    const auto& p = prob[g];
    for (double v : p) std::snprintf(number, sizeof number, "%.6g", v), csv << "," << number;
    csv << "," << (std::max_element(p.begin(), p.end()) - p.begin()) << "," << label << ",\n";
    ++g;
  }
  return csv.str();
}

Scores score(const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.size(0), classes = logits.size(1);
  nn::SoftmaxCrossEntropy loss;
  loss.forward(logits, labels);
  run::MetricsAccumulator acc;
  acc.add(logits, labels, loss.loss_sum());
  Scores s;
  s.metrics = acc.result();
  s.confusion.assign(size_t(classes), std::vector<int64_t>(size_t(classes), 0));
  for (int64_t g = 0; g < n; ++g) ++s.confusion[size_t(labels.data<int64_t>()[g])][size_t(predicted_class(logits, g))];
  return s;
}

std::vector<std::string> write_scores(const std::string& out, const Scores& scores, int64_t failed,
                                      const Tensor& logits, const Tensor& labels, std::FILE* progress) {
  std::vector<std::string> files;
  const std::string stem = (fs::path(out).parent_path() / fs::path(out).stem()).string();
  nlohmann::ordered_json j = run::metrics_json(scores.metrics);
  j["confusion"] = scores.confusion;
  j["failed"] = failed;
  write_file_atomically(stem + "_metrics.json", j.dump(2) + "\n");
  files.push_back(stem + "_metrics.json");
  if (logits.size(1) != 2) return files;

  std::vector<double> score;  // the score the AUC ranks
  std::vector<int64_t> label;
  for (int64_t g = 0; g < logits.size(0); ++g) {
    const float* z = logits.data<float>() + 2 * g;
    score.push_back(run::positive_score(z[0], z[1]));
    label.push_back(labels.data<int64_t>()[g]);
  }
  const bool both = std::count(label.begin(), label.end(), 1) > 0 && std::count(label.begin(), label.end(), 0) > 0;
  if (!both) {
    if (progress)
      std::fprintf(progress, "no ROC curve: the readable labelled scans are all of class %lld\n",
                   static_cast<long long>(label.empty() ? 0 : label[0]));
    return files;
  }
  const auto curve = explain::roc_curve(score, label);
  std::ostringstream roc;
  roc << std::setprecision(17) << "threshold,fpr,tpr\n";
  for (const auto& pt : curve) roc << pt.threshold << "," << pt.fpr << "," << pt.tpr << "\n";
  write_file_atomically(stem + "_roc.csv", roc.str());
  write_png(stem + "_roc.png", explain::render_roc(curve, scores.metrics.auc));
  files.push_back(stem + "_roc.csv");
  files.push_back(stem + "_roc.png");
  return files;
}

}  // namespace gridnn::predict
