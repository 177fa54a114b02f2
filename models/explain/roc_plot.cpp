#include "models/explain/roc_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>

#include "core/error.h"

namespace gridnn::explain {
namespace {

constexpr int kMinSize = 200;
constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kGrid{225, 225, 225};
constexpr Rgb kChance{150, 150, 150};
constexpr Rgb kInk{0, 0, 0};
constexpr Rgb kCurve{31, 119, 180};

// A straight line of square dots `thickness` pixels wide, from (x0, y0) to (x1, y1).
void draw_line(RgbImage& image, double x0, double y0, double x1, double y1, int64_t thickness, Rgb colour) {
  const int64_t steps = std::max<int64_t>(1, std::llround(std::max(std::abs(x1 - x0), std::abs(y1 - y0))));
  for (int64_t i = 0; i <= steps; ++i) {
    const double t = double(i) / double(steps);
    const int64_t x = std::llround(x0 + t * (x1 - x0)), y = std::llround(y0 + t * (y1 - y0));
    fill_rect(image, x - thickness / 2, y - thickness / 2, thickness, thickness, colour);
  }
}

std::string tick_label(int tenths) {
  if (tenths == 0) return "0";
  if (tenths == 10) return "1";
  return "0." + std::to_string(tenths);
}

}  // namespace

std::vector<RocPoint> roc_curve(const std::vector<double>& score, const std::vector<int64_t>& label) {
  GRIDNN_REQUIRE(score.size() == label.size(), "roc_curve: ", score.size(), " scores but ", label.size(), " labels");
  int64_t positives = 0;
  for (size_t i = 0; i < score.size(); ++i) {
    GRIDNN_REQUIRE(label[i] == 0 || label[i] == 1, "roc_curve: label ", label[i], " of sample ", i,
                   " is neither 0 nor 1");
    GRIDNN_REQUIRE(std::isfinite(score[i]), "roc_curve: score ", score[i], " of sample ", i, " is not finite");
    positives += label[i];
  }
  const int64_t negatives = int64_t(label.size()) - positives;
  GRIDNN_REQUIRE(positives > 0 && negatives > 0, "roc_curve: needs both classes, got ", positives, " positives and ",
                 negatives, " negatives");

  std::vector<size_t> order(score.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });

  std::vector<RocPoint> curve{{std::numeric_limits<double>::infinity(), 0.0, 0.0}};
  int64_t true_positives = 0, false_positives = 0;
  for (size_t i = 0; i < order.size();) {
    const double threshold = score[order[i]];
    for (; i < order.size() && score[order[i]] == threshold; ++i) {
      if (label[order[i]] == 1)
        ++true_positives;
      else
        ++false_positives;
    }
    curve.push_back(
        {threshold, double(false_positives) / double(negatives), double(true_positives) / double(positives)});
  }
  return curve;
}

RocFrame roc_frame(int size) {
  GRIDNN_REQUIRE(size >= kMinSize, "render_roc: size ", size, " is below the smallest plot, ", kMinSize, " px");
  RocFrame frame;
  frame.font_scale = std::max(1, int(std::lround(size / 250.0)));
  const int64_t s = frame.font_scale;
  frame.left = 24 * s;         // tick labels "0.8" and their gap
  frame.top = 12 * s;          // "TPR"
  frame.side = size - 32 * s;  // below: 24 * s for the tick labels and "FPR"; right: 8 * s
  return frame;
}

RgbImage render_roc(const std::vector<RocPoint>& curve, double auc, int size) {
  const RocFrame frame = roc_frame(size);
  GRIDNN_REQUIRE(!curve.empty(), "render_roc: the curve has no points");
  for (const RocPoint& p : curve)
    GRIDNN_REQUIRE(p.fpr >= 0 && p.fpr <= 1 && p.tpr >= 0 && p.tpr <= 1, "render_roc: point (fpr ", p.fpr, ", tpr ",
                   p.tpr, ") lies outside the unit square");
  GRIDNN_REQUIRE(auc >= 0 && auc <= 1, "render_roc: auc ", auc, " lies outside [0, 1]");

  const int scale = frame.font_scale;
  const double side = double(frame.side);
  auto px = [&](double fpr) { return double(frame.left) + fpr * side; };
  auto py = [&](double tpr) { return double(frame.top) + (1 - tpr) * side; };
  RgbImage image = RgbImage::filled(size, size, kBackground);

  for (int tenths = 0; tenths <= 10; tenths += 2) {
    const double at = tenths / 10.0;
    draw_line(image, px(at), py(0), px(at), py(1), 1, kGrid);
    draw_line(image, px(0), py(at), px(1), py(at), 1, kGrid);
    const std::string label = tick_label(tenths);
    const int64_t x = std::llround(px(at)), y = std::llround(py(at));
    draw_text(image, x - text_width(label, scale) / 2, frame.top + frame.side + 3 * scale, label, kInk, scale);
    draw_text(image, frame.left - 3 * scale - text_width(label, scale), y - kGlyphHeight * scale / 2, label, kInk,
              scale);
  }
  draw_line(image, px(0), py(0), px(1), py(1), 1, kChance);
  for (const double at : {0.0, 1.0}) {  // the frame
    draw_line(image, px(at), py(0), px(at), py(1), 1, kInk);
    draw_line(image, px(0), py(at), px(1), py(at), 1, kInk);
  }
  for (size_t i = 1; i < curve.size(); ++i)
    draw_line(image, px(curve[i - 1].fpr), py(curve[i - 1].tpr), px(curve[i].fpr), py(curve[i].tpr), 2 * scale, kCurve);

  draw_text(image, 2 * scale, 2 * scale, "TPR", kInk, scale);
  draw_text(image, frame.left + frame.side - text_width("FPR", scale), frame.top + frame.side + 13 * scale, "FPR", kInk,
            scale);
  char auc_text[16];
  std::snprintf(auc_text, sizeof auc_text, "AUC %.3f", auc);
  const int64_t text_x = frame.left + frame.side - 6 * scale - text_width(auc_text, scale);
  const int64_t text_y = frame.top + frame.side - 6 * scale - kGlyphHeight * scale;
  fill_rect(image, text_x - 2 * scale, text_y - 2 * scale, text_width(auc_text, scale) + 4 * scale,
            (kGlyphHeight + 4) * scale, kBackground);
  draw_text(image, text_x, text_y, auc_text, kInk, scale);
  return image;
}

}  // namespace gridnn::explain
