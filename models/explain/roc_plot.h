// The ROC curve of a binary classifier's scores, and its plot.
//
// roc_curve: a sample is called positive when its score >= threshold. The first point is
// (threshold +inf, fpr 0, tpr 0), nothing called positive; then one point per distinct score,
// from the highest down, counting every sample at or above it, so the last point is (1, 1).
// Positives and negatives tied at one score move the curve diagonally in one step. The
// points are also the rows of the CSV gridnn-predict writes (threshold, fpr, tpr).
//
// render_roc: a size x size white image; the unit square of (fpr, tpr) is a square frame
// (roc_frame) with fpr to the right and tpr up, light grid lines every 0.2 with tick labels,
// the chance diagonal in grey, the curve in blue, "FPR", "TPR" and "AUC 0.934" (three
// decimals) in core/png.h's 5x7 font.
#pragma once

#include <cstdint>
#include <vector>

#include "core/png.h"

namespace gridnn::explain {

struct RocPoint {
  double threshold, fpr, tpr;
};

// gridnn::Error unless the two have one length, every label is 0 or 1, both occur, and
// every score is finite.
std::vector<RocPoint> roc_curve(const std::vector<double>& score, const std::vector<int64_t>& label);

// Where the unit square lies in a plot of `size` pixels: (fpr, tpr) is drawn at
// (left + fpr * side, top + (1 - tpr) * side), rounded to the nearest pixel.
struct RocFrame {
  int64_t left = 0, top = 0, side = 0;
  int font_scale = 1;
};
RocFrame roc_frame(int size);

// gridnn::Error for a size below 200, an empty curve, a point outside the unit square or an
// auc outside [0, 1].
RgbImage render_roc(const std::vector<RocPoint>& curve, double auc, int size = 400);

}  // namespace gridnn::explain
