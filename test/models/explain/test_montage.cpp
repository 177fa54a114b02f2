// models/explain/montage.h and roc_plot.h: where the heat and the anatomy land in the
// montage (orientation, scaling), its colour bar and region outline, and the ROC curve
// against hand-computed points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/explain/montage.h"
#include "models/explain/roc_plot.h"
#include "test/support/error_message.h"

namespace gridnn::explain {
namespace {

using test::error_message;

Tensor volume(int64_t D, int64_t H, int64_t W, float value) {
  return Tensor::from_vector(std::vector<float>(size_t(D * H * W), value), Shape{D, H, W});
}

float& at(Tensor& t, int64_t d, int64_t h, int64_t w) { return t.data<float>()[(d * t.size(1) + h) * t.size(2) + w]; }

// A [D, H, W] volume whose voxel (d, h, w) is value(d, h, w).
template <class Value>
Tensor volume_of(int64_t D, int64_t H, int64_t W, Value value) {
  Tensor t = volume(D, H, W, 0.0f);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) at(t, d, h, w) = value(d, h, w);
  return t;
}

// The montage pixel showing voxel `v` in panel `p` (0 axial, 1 coronal, 2 sagittal), by the
// header's rule: the horizontal axis's index grows to the right, the vertical's upwards.
struct Pixel {
  int64_t x, y;
};
Pixel pixel_of(const MontageLayout& layout, const Shape& shape, int p, std::array<int64_t, 3> v) {
  const int across[3] = {2, 2, 1}, up[3] = {1, 0, 0};
  const PanelRect& r = layout.panels[size_t(p)];
  const int64_t n_across = shape[across[p]], n_up = shape[up[p]];
  const double fx = (double(v[size_t(across[p])]) + 0.5) / double(n_across);
  const double fy = (double(n_up - 1 - v[size_t(up[p])]) + 0.5) / double(n_up);
  return {r.x + int64_t(fx * double(r.width)), r.y + int64_t(fy * double(r.height))};
}

bool is_grey(Rgb c) { return c.r == c.g && c.g == c.b; }

TEST(PeakVoxel, FindsTheHeatCubesPeakAndTheFirstOfTies) {
  Tensor heat = volume(6, 7, 8, 0.0f);
  for (int64_t d = 2; d < 5; ++d)
    for (int64_t h = 3; h < 6; ++h)
      for (int64_t w = 4; w < 7; ++w) at(heat, d, h, w) = 0.8f;
  at(heat, 3, 4, 5) = 1.0f;
  at(heat, 0, 0, 0) = std::nanf("");
  EXPECT_EQ(peak_voxel(heat), (std::array<int64_t, 3>{3, 4, 5}));
  at(heat, 4, 5, 6) = 1.0f;  // a tie later in memory order
  EXPECT_EQ(peak_voxel(heat), (std::array<int64_t, 3>{3, 4, 5}));
  at(heat, 1, 6, 7) = 1.0f;  // a tie earlier in memory order
  EXPECT_EQ(peak_voxel(heat), (std::array<int64_t, 3>{1, 6, 7}));
}

TEST(Montage, HeatIsColouredWhereItIsAndTheRestIsGrey) {
  const int64_t D = 20, H = 24, W = 28;
  Tensor anatomy = volume_of(D, H, W, [](int64_t d, int64_t h, int64_t w) {  // a smooth brain-like blob
    const double r2 = std::pow((d - 10) / 8.0, 2) + std::pow((h - 12) / 10.0, 2) + std::pow((w - 14) / 11.0, 2);
    return r2 < 1 ? float(0.5 + 0.3 * std::sin(0.7 * double(d + h + w))) : 0.0f;
  });
  Tensor heat = volume(D, H, W, 0.0f);
  for (int64_t d = 10; d < 14; ++d)
    for (int64_t h = 12; h < 16; ++h)
      for (int64_t w = 16; w < 20; ++w) at(heat, d, h, w) = 0.6f;
  at(heat, 12, 14, 18) = 1.0f;
  at(heat, 12, 4, 18) = 0.15f;  // below the threshold: not drawn

  const std::array<int64_t, 3> peak = peak_voxel(heat);
  ASSERT_EQ(peak, (std::array<int64_t, 3>{12, 14, 18}));
  const RgbImage image = render_montage(anatomy, heat, peak);
  const MontageLayout layout = montage_layout(anatomy.shape(), {1, 1, 1});
  ASSERT_EQ(image.width, layout.width);
  ASSERT_EQ(image.height, layout.height);
  for (int p = 0; p < 3; ++p) {
    SCOPED_TRACE("panel " + std::to_string(p));
    const Pixel hot = pixel_of(layout, anatomy.shape(), p, peak);
    const Rgb c = image.pixel(hot.x, hot.y);
    EXPECT_FALSE(is_grey(c)) << int(c.r) << " " << int(c.g) << " " << int(c.b);
    EXPECT_GT(c.r, c.g);  // jet at 1 is dark red
    EXPECT_GT(c.r, c.b);
    const Pixel far = pixel_of(layout, anatomy.shape(), p, {1, 1, 1});
    EXPECT_TRUE(is_grey(image.pixel(far.x, far.y)));
  }
  const Pixel faint = pixel_of(layout, anatomy.shape(), 0, {12, 4, 18});  // axial, d = 12
  EXPECT_TRUE(is_grey(image.pixel(faint.x, faint.y)));
  const Pixel warm = pixel_of(layout, anatomy.shape(), 0, {12, 12, 16});  // heat 0.6: yellowish
  const Rgb w = image.pixel(warm.x, warm.y);
  EXPECT_FALSE(is_grey(w));
  EXPECT_GT(int(w.g), int(w.b));
}

// A bright block at high d, h and w (superior, anterior, right): with the centre inside it,
// every panel shows it, and its white pixels must all lie in the panel's top-right quarter
// (neurological: right on the right; anterior right in the sagittal panel; superior and,
// in the axial panel, anterior up).
TEST(Montage, OrientationIsNeurologicalWithSuperiorAndAnteriorUp) {
  const int64_t D = 16, H = 18, W = 20;
  Tensor anatomy = volume_of(
      D, H, W, [](int64_t d, int64_t h, int64_t w) { return float(0.5 + 0.4 * std::sin(double(d * 3 + h * 5 + w))); });
  for (int64_t d = 11; d < 15; ++d)  // 64 voxels: more than 1%, so the 99th percentile is 5
    for (int64_t h = 13; h < 17; ++h)
      for (int64_t w = 15; w < 19; ++w) at(anatomy, d, h, w) = 5.0f;
  const Tensor heat = volume(D, H, W, 0.0f);
  const RgbImage image = render_montage(anatomy, heat, {12, 14, 16}, {1, 1, 1}, 2);
  const MontageLayout layout = montage_layout(anatomy.shape(), {1, 1, 1}, 2);
  const char* names[3] = {"axial", "coronal", "sagittal"};
  for (int p = 0; p < 3; ++p) {
    SCOPED_TRACE(names[p]);
    const PanelRect& r = layout.panels[size_t(p)];
    int64_t white = 0, misplaced = 0;
    for (int64_t y = r.y; y < r.y + r.height; ++y)
      for (int64_t x = r.x; x < r.x + r.width; ++x)
        if (image.pixel(x, y) == Rgb{255, 255, 255}) {
          ++white;
          if (x < r.x + r.width / 2 || y >= r.y + r.height / 2) ++misplaced;
        }
    EXPECT_EQ(white, 4 * 4 * 2 * 2);  // the block's 4 x 4 voxels at zoom 2
    EXPECT_EQ(misplaced, 0);
    // The letters: the high end of the horizontal axis in the right margin.
    int64_t letter = 0;
    for (int64_t y = r.y; y < r.y + r.height; ++y)
      for (int64_t x = r.x + r.width; x < r.x + r.width + layout.margin; ++x) letter += image.pixel(x, y).r == 255;
    EXPECT_GT(letter, 0);
  }
}

TEST(Montage, AnisotropicVoxelsScaleToMillimetres) {
  // [10, 20, 40] voxels of 4 x 2 x 1 mm: 40 mm along every axis, so every panel is square.
  const int64_t D = 10, H = 20, W = 40;
  Tensor anatomy = volume_of(D, H, W, [](int64_t d, int64_t, int64_t) { return float(d); });
  const MontageLayout layout = montage_layout(anatomy.shape(), {4, 2, 1}, 1);
  for (const PanelRect& r : layout.panels) {
    EXPECT_EQ(r.width, 40);
    EXPECT_EQ(r.height, 40);
  }
  const RgbImage image = render_montage(anatomy, volume(D, H, W, 0.0f), {5, 10, 20}, {4, 2, 1}, 1);
  // The coronal panel: d upwards, 4 rows per slice, brighter (higher d) at the top.
  const PanelRect& coronal = layout.panels[1];
  for (int64_t row = 0; row < 40; ++row) {
    const Rgb c = image.pixel(coronal.x + 7, coronal.y + row);
    EXPECT_EQ(c, image.pixel(coronal.x + 7, coronal.y + row / 4 * 4)) << "row " << row;
    if (row >= 4 && row % 4 == 0) {
      EXPECT_LT(c.r, image.pixel(coronal.x + 7, coronal.y + row - 4).r) << "row " << row;
    }
  }
}

TEST(Montage, AutomaticZoomGivesPanelsAbout300PixelsTall) {
  const MontageLayout layout = montage_layout(Shape{91, 109, 91}, {1, 1, 1});
  EXPECT_EQ(layout.zoom, 3);
  EXPECT_EQ(layout.panels[0].height, 327);  // axial: 109 voxels of h upwards
  EXPECT_EQ(layout.panels[1].height, 273);
  EXPECT_EQ(layout.panels[2].width, 327);
  EXPECT_EQ(montage_layout(Shape{32, 32, 32}, {1, 1, 1}).zoom, 9);
  EXPECT_EQ(montage_layout(Shape{256, 256, 256}, {1, 1, 1}).zoom, 1);
}

TEST(Montage, RejectsBadInputsWithClearMessages) {
  const Tensor a = volume(4, 5, 6, 1.0f);
  EXPECT_NE(error_message([&] {
              render_montage(a, volume(4, 5, 5, 0.0f), {0, 0, 0});
            }).find("differ in shape"),
            std::string::npos);
  EXPECT_NE(error_message([&] {
              render_montage(a, a, {0, 5, 0});
            }).find("outside the volume [4, 5, 6]"),
            std::string::npos);
  EXPECT_NE(error_message([&] {
              render_montage(a, a, {0, 0, 0}, {1, 0, 1});
            }).find("must be positive"),
            std::string::npos);
  const Tensor as_i64 = Tensor::zeros(Shape{4, 5, 6}, DType::i64);
  EXPECT_NE(error_message([&] { render_montage(as_i64, a, {0, 0, 0}); }).find("CPU f32 volume"), std::string::npos);
  EXPECT_NE(error_message([&] {
              render_montage(Tensor::zeros(Shape{0, 5, 6}), Tensor::zeros(Shape{0, 5, 6}), {0, 0, 0});
            }).find("is empty"),
            std::string::npos);
  EXPECT_NE(error_message([&] { peak_voxel(volume(2, 2, 2, std::nanf(""))); }).find("NaN"), std::string::npos);
}

// The bar: jet(1) = (128, 0, 0) in the top row (red's tent at half height, rounded up),
// jet(0) = (0, 0, 128) dimmed to a quarter, (0, 0, 32), in the bottom row; full brightness
// (some channel at least 128) from 0.2 up, at most 64 below; white labels beside it.
TEST(Montage, ColourBarShowsJetWithTheUndrawnPartDimmedAndTicks) {
  const int64_t D = 20, H = 24, W = 28;
  const Tensor anatomy = volume(D, H, W, 0.5f);
  const RgbImage image = render_montage(anatomy, volume(D, H, W, 0.0f), {10, 12, 14});
  const MontageLayout layout = montage_layout(anatomy.shape(), {1, 1, 1});
  const PanelRect& bar = layout.bar;
  const PanelRect& sagittal = layout.panels[2];
  EXPECT_EQ(bar.x, sagittal.x + sagittal.width + 2 * layout.margin);
  EXPECT_EQ(bar.y, layout.margin);
  EXPECT_EQ(bar.width, layout.margin);
  EXPECT_EQ(bar.height, layout.zoom * H);  // the tallest panel: the axial, h upwards
  EXPECT_EQ(layout.width, bar.x + bar.width + 7 * layout.font_scale + (3 * 6 - 1) * layout.font_scale + layout.margin);
  ASSERT_EQ(image.width, layout.width);

  EXPECT_EQ(image.pixel(bar.x, bar.y), (Rgb{128, 0, 0}));
  EXPECT_EQ(image.pixel(bar.x + bar.width - 1, bar.y + bar.height - 1), (Rgb{0, 0, 32}));
  for (int64_t row = 0; row < bar.height; ++row) {
    const double value = double(bar.height - 1 - row) / double(bar.height - 1);
    const Rgb c = image.pixel(bar.x + bar.width / 2, bar.y + row);
    EXPECT_EQ(c, image.pixel(bar.x, bar.y + row)) << "row " << row;
    const int brightest = std::max({int(c.r), int(c.g), int(c.b)});
    if (value >= 0.2) {
      EXPECT_GE(brightest, 128) << "row " << row;
    } else {
      EXPECT_LE(brightest, 64) << "row " << row;
    }
  }
  // Each label's glyphs, drawn alone at its place: right of a 2-scale tick and a 5-scale gap,
  // centred on the row of its value.
  const int s = layout.font_scale;
  const struct {
    double value;
    std::string text;
  } labels[] = {{1, "1"}, {0.2, "0.2"}, {0, "0"}};
  for (const auto& label : labels) {
    SCOPED_TRACE(label.text);
    const int64_t row = bar.y + std::llround((1 - label.value) * double(bar.height - 1));
    EXPECT_EQ(image.pixel(bar.x + bar.width, row), (Rgb{255, 255, 255}));  // the tick
    RgbImage alone = RgbImage::filled(image.width, image.height, Rgb{0, 0, 0});
    draw_text(alone, bar.x + bar.width + 7 * s, row - 7 * s / 2, label.text, Rgb{255, 255, 255}, s);
    int64_t lit = 0;
    for (int64_t y = 0; y < image.height; ++y)
      for (int64_t x = bar.x + bar.width + 2 * s; x < image.width; ++x)
        if (alone.pixel(x, y) == Rgb{255, 255, 255}) {
          ++lit;
          EXPECT_EQ(image.pixel(x, y), (Rgb{255, 255, 255})) << x << ", " << y;
        }
    EXPECT_GT(lit, 0);
  }
}

// A cube region (d 7..12, h 5..14, w 9..16) in a 20 x 24 x 28 volume: in the axial panel
// through its centre the magenta pixels are exactly the cube's cross-section's pixels within
// line_width of its border; the coronal panel through d = 3 (outside the cube) has none.
TEST(Montage, RegionOutlineLiesOnTheCubesBorder) {
  const int64_t D = 20, H = 24, W = 28;
  Tensor anatomy = volume_of(D, H, W, [](int64_t d, int64_t h, int64_t w) { return float((d * 7 + h * 3 + w) % 11); });
  Tensor heat = volume(D, H, W, 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t w = 0; w < W; ++w) at(heat, 10, h, w) = float(w) / float(W - 1);  // the whole jet range
  Tensor region = volume(D, H, W, 0.0f);
  const int64_t d0 = 7, d1 = 12, h0 = 5, h1 = 14, w0 = 9, w1 = 16;
  for (int64_t d = d0; d <= d1; ++d)
    for (int64_t h = h0; h <= h1; ++h)
      for (int64_t w = w0; w <= w1; ++w) at(region, d, h, w) = 1.0f;
  const Rgb magenta{255, 0, 255};

  const RgbImage plain = render_montage(anatomy, heat, {10, 3, 14});
  const RgbImage image = render_montage(anatomy, heat, {10, 3, 14}, {1, 1, 1}, 0, true, region);
  const MontageLayout layout = montage_layout(anatomy.shape(), {1, 1, 1});
  ASSERT_EQ(layout.zoom, 13);  // round(300 / 24)
  ASSERT_EQ(layout.line_width, 2);
  const int64_t z = layout.zoom, t = layout.line_width;
  // Axial (fixed d = 10): w to the right, h upwards; the cube spans these pixels.
  const PanelRect& axial = layout.panels[0];
  const int64_t left = axial.x + w0 * z, right = axial.x + (w1 + 1) * z;            // [left, right)
  const int64_t top = axial.y + (H - 1 - h1) * z, bottom = axial.y + (H - h0) * z;  // [top, bottom)
  int64_t outline = 0;
  for (int64_t y = axial.y; y < axial.y + axial.height; ++y)
    for (int64_t x = axial.x; x < axial.x + axial.width; ++x) {
      const bool in_cube = x >= left && x < right && y >= top && y < bottom;
      const bool border = in_cube && (x < left + t || x >= right - t || y < top + t || y >= bottom - t);
      const Rgb c = image.pixel(x, y);
      if (border) {
        ++outline;
        EXPECT_EQ(c, magenta) << x << ", " << y;
      } else {
        EXPECT_EQ(c, plain.pixel(x, y)) << x << ", " << y;
        EXPECT_NE(c, magenta) << x << ", " << y;
      }
    }
  EXPECT_EQ(outline, 2 * t * ((right - left) + (bottom - top)) - 4 * t * t);
  // Coronal through h = 3 and sagittal through w = 14: the first misses the cube, the second
  // cuts it (h 5..14 across, d 7..12 up).
  const PanelRect& coronal = layout.panels[1];
  for (int64_t y = coronal.y; y < coronal.y + coronal.height; ++y)
    for (int64_t x = coronal.x; x < coronal.x + coronal.width; ++x)
      ASSERT_EQ(image.pixel(x, y), plain.pixel(x, y)) << x << ", " << y;
  const PanelRect& sagittal = layout.panels[2];
  EXPECT_EQ(image.pixel(sagittal.x + h0 * z, sagittal.y + (D - 1 - d0) * z + z / 2), magenta);
  EXPECT_EQ(image.pixel(sagittal.x + h0 * z + z / 2, sagittal.y + (D - 1 - 10) * z),
            plain.pixel(sagittal.x + h0 * z + z / 2, sagittal.y + (D - 1 - 10) * z));

  // A region touching the volume's edge is outlined along the slice's edge too.
  Tensor edge = volume(D, H, W, 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t w = 0; w < W; ++w) at(edge, 10, h, w) = 1.0f;
  const RgbImage framed = render_montage(anatomy, heat, {10, 3, 14}, {1, 1, 1}, 0, true, edge);
  EXPECT_EQ(framed.pixel(axial.x, axial.y + axial.height / 2), magenta);
  EXPECT_EQ(framed.pixel(axial.x + axial.width / 2, axial.y + axial.height / 2),
            plain.pixel(axial.x + axial.width / 2, axial.y + axial.height / 2));

  const std::string wrong_shape = error_message([&] {
    render_montage(anatomy, heat, {10, 3, 14}, {1, 1, 1}, 0, true, volume(D, H, W - 1, 0.0f));
  });
  EXPECT_NE(wrong_shape.find("[20, 24, 27]"), std::string::npos) << wrong_shape;
  EXPECT_NE(wrong_shape.find("[20, 24, 28]"), std::string::npos) << wrong_shape;
  const std::string wrong_dtype = error_message([&] {
    render_montage(anatomy, heat, {10, 3, 14}, {1, 1, 1}, 0, true, Tensor::zeros(Shape{D, H, W}, DType::i64));
  });
  EXPECT_NE(wrong_dtype.find("must be a CPU f32 mask of the anatomy's shape [20, 24, 28]"), std::string::npos)
      << wrong_dtype;
}

TEST(RocCurve, MatchesHandComputedPointsWithTies) {
  // By score: 0.9 +, 0.8 + and -, 0.7 +, 0.6 - and +, 0.3 -: 4 positives, 3 negatives.
  const std::vector<double> score{0.6, 0.9, 0.3, 0.8, 0.7, 0.8, 0.6};
  const std::vector<int64_t> label{0, 1, 0, 0, 1, 1, 1};
  const std::vector<RocPoint> curve = roc_curve(score, label);
  const std::vector<RocPoint> expected{{INFINITY, 0, 0},     {0.9, 0, 0.25},      {0.8, 1.0 / 3, 0.5},
                                       {0.7, 1.0 / 3, 0.75}, {0.6, 2.0 / 3, 1.0}, {0.3, 1, 1}};
  ASSERT_EQ(curve.size(), expected.size());
  double auc = 0;
  for (size_t i = 0; i < curve.size(); ++i) {
    EXPECT_EQ(curve[i].threshold, expected[i].threshold) << i;
    EXPECT_DOUBLE_EQ(curve[i].fpr, expected[i].fpr) << i;
    EXPECT_DOUBLE_EQ(curve[i].tpr, expected[i].tpr) << i;
    if (i > 0) auc += (curve[i].fpr - curve[i - 1].fpr) * (curve[i].tpr + curve[i - 1].tpr) / 2;
  }
  EXPECT_DOUBLE_EQ(auc, 0.75);  // Mann-Whitney: 9 of 12 pairs, ties counting 1/2

  EXPECT_NE(error_message([] { roc_curve({0.1, 0.2}, {1, 1}); }).find("both classes"), std::string::npos);
  EXPECT_NE(error_message([] { roc_curve({0.1, 0.2}, {1, 2}); }).find("neither 0 nor 1"), std::string::npos);
  EXPECT_NE(error_message([] { roc_curve({0.1}, {1, 0}); }).find("1 scores but 2 labels"), std::string::npos);
  EXPECT_NE(error_message([] { roc_curve({NAN, 0.2}, {1, 0}); }).find("not finite"), std::string::npos);
}

TEST(RocPlot, DrawsTheDiagonalTheCurveAndTheAuc) {
  const std::vector<RocPoint> curve{{INFINITY, 0, 0}, {0.5, 0.1, 0.7}, {0.2, 1, 1}};
  const RgbImage image = render_roc(curve, 0.934, 400);
  ASSERT_EQ(image.width, 400);
  ASSERT_EQ(image.height, 400);
  const RocFrame f = roc_frame(400);
  auto at = [&](double fpr, double tpr) {
    return image.pixel(f.left + std::llround(fpr * double(f.side)), f.top + std::llround((1 - tpr) * double(f.side)));
  };
  for (double t : {0.3, 0.5, 0.7}) {  // the chance diagonal: grey, neither white nor black
    const Rgb c = at(t, t);
    EXPECT_TRUE(is_grey(c) && c.r > 0 && c.r < 255) << t << ": " << int(c.r) << " " << int(c.g) << " " << int(c.b);
  }
  const Rgb on_curve = at(0.55, 0.85);  // halfway along the second segment
  EXPECT_GT(int(on_curve.b), int(on_curve.r) + 50);
  EXPECT_EQ(at(0.9, 0.5), (Rgb{255, 255, 255}));           // off every line
  EXPECT_EQ(at(1, 0.5), (Rgb{0, 0, 0}));                   // the frame's right side
  EXPECT_NE(render_roc(curve, 0.75, 400).rgb, image.rgb);  // the AUC text is drawn
  EXPECT_EQ(render_roc(curve, 0.934, 250).width, 250);

  EXPECT_NE(error_message([&] { render_roc(curve, 0.9, 100); }).find("smallest plot"), std::string::npos);
  EXPECT_NE(error_message([&] { render_roc({{0, 1.5, 0}}, 0.9); }).find("outside the unit square"), std::string::npos);
}

}  // namespace
}  // namespace gridnn::explain
