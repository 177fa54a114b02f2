#include "models/explain/montage.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace gridnn::explain {
namespace {

constexpr double kTargetPanelHeight = 300;  // pixels, for the automatic zoom
constexpr double kHeatThreshold = 0.2;
constexpr Rgb kLetterColour{255, 255, 255};
constexpr Rgb kOutlineColour{255, 0, 255};
constexpr double kBelowThresholdDimming = 0.25;  // the colour bar below the threshold
constexpr int kTickLength = 2, kTickGap = 5;     // before a label, times font_scale (montage.h)

// Each panel's axes (0 = d, 1 = h, 2 = w): the one along the image's width, the one up it;
// the third stays at the centre's index.
struct PanelAxes {
  int across, up;
};
constexpr std::array<PanelAxes, 3> kPanelAxes{{{2, 1}, {2, 0}, {1, 0}}};  // axial, coronal, sagittal
// The letters at the low and the high end of each axis.
constexpr std::array<std::array<char, 2>, 3> kAxisLetters{{{'I', 'S'}, {'P', 'A'}, {'L', 'R'}}};

void require_volume(const Tensor& t, const char* role) {
  GRIDNN_REQUIRE(t.defined() && t.rank() == 3 && t.dtype() == DType::f32 && t.device().is_cpu(),
                 "render_montage: ", role, " must be a CPU f32 volume [D, H, W], got ",
                 t.defined() ? t.str() : std::string("an undefined tensor"));
  GRIDNN_REQUIRE(t.numel() > 0, "render_montage: ", role, " ", t.str(), " is empty");
}

// The 1st and 99th percentiles (nearest rank) of the finite values; {0, 0} when there are none.
std::array<double, 2> window(const Tensor& anatomy) {
  std::vector<float> finite;
  finite.reserve(size_t(anatomy.numel()));
  const float* v = anatomy.data<float>();
  for (int64_t i = 0; i < anatomy.numel(); ++i)
    if (std::isfinite(v[i])) finite.push_back(v[i]);
  if (finite.empty()) return {0, 0};
  auto quantile = [&](double q) {
    auto nth = finite.begin() + std::lround(q * double(finite.size() - 1));
    std::nth_element(finite.begin(), nth, finite.end());
    return double(*nth);
  };
  return {quantile(0.01), quantile(0.99)};
}

double grey(float value, const std::array<double, 2>& win) {
  if (!std::isfinite(value)) return 0;
  if (win[1] <= win[0]) return value > win[0] ? 255 : 0;
  return 255 * std::clamp((double(value) - win[0]) / (win[1] - win[0]), 0.0, 1.0);
}

// Jet: blue at 0, cyan, yellow, red, dark red at 1 (each channel a clamped tent).
std::array<double, 3> jet(double x) {
  auto tent = [x](double centre) { return 255 * std::clamp(1.5 - std::abs(4 * x - centre), 0.0, 1.0); };
  return {tent(3), tent(2), tent(1)};
}

// The colour bar's pixel at `value` in [0, 1].
Rgb bar_colour(double value) {
  const double dim = value < kHeatThreshold ? kBelowThresholdDimming : 1.0;
  const std::array<double, 3> colour = jet(value);
  auto level = [dim](double c) { return uint8_t(std::lround(dim * c)); };
  return {level(colour[0]), level(colour[1]), level(colour[2])};
}

Rgb blend(double grey_level, float heat_value) {
  const double heat = std::isnan(heat_value) ? 0.0 : std::clamp(double(heat_value), 0.0, 1.0);
  const double alpha = heat < kHeatThreshold ? 0.0 : 0.3 + 0.5 * (heat - kHeatThreshold) / (1 - kHeatThreshold);
  const std::array<double, 3> colour = jet(heat);
  auto mix = [&](double c) { return uint8_t(std::lround((1 - alpha) * grey_level + alpha * c)); };
  return {mix(colour[0]), mix(colour[1]), mix(colour[2])};
}

// Pixel p of P along an axis of n voxels shows voxel floor((p + 1/2) n / P).
int64_t nearest_voxel(int64_t p, int64_t pixels, int64_t n) {
  return std::min(n - 1, ((2 * p + 1) * n) / (2 * pixels));
}

void draw_letter(RgbImage& image, int64_t centre_x, int64_t centre_y, char letter, int scale) {
  draw_text(image, centre_x - kGlyphWidth * scale / 2, centre_y - kGlyphHeight * scale / 2, std::string(1, letter),
            kLetterColour, scale);
}

// The row of the colour bar that shows `value`.
int64_t bar_row(const PanelRect& bar, double value) {
  return bar.y + std::llround((1 - value) * double(bar.height - 1));
}

void draw_colour_bar(RgbImage& image, const MontageLayout& layout) {
  const PanelRect& bar = layout.bar;
  for (int64_t row = 0; row < bar.height; ++row) {
    const double value = bar.height > 1 ? double(bar.height - 1 - row) / double(bar.height - 1) : 1.0;
    fill_rect(image, bar.x, bar.y + row, bar.width, 1, bar_colour(value));
  }
  const int scale = layout.font_scale;
  const struct {
    double value;
    const char* label;
  } ticks[] = {{1.0, "1"}, {kHeatThreshold, "0.2"}, {0.0, "0"}};
  for (const auto& tick : ticks) {
    const int64_t y = bar_row(bar, tick.value);
    fill_rect(image, bar.x + bar.width, y, kTickLength * scale, 1, kLetterColour);
    draw_text(image, bar.x + bar.width + (kTickLength + kTickGap) * scale, y - kGlyphHeight * scale / 2, tick.label,
              kLetterColour, scale);
  }
}

// One panel's voxel along each pixel column (across) and row (up), top row first.
struct PanelVoxels {
  std::vector<int64_t> across, up;
};

PanelVoxels panel_voxels(const PanelRect& rect, int64_t n_across, int64_t n_up) {
  PanelVoxels v;
  for (int64_t px = 0; px < rect.width; ++px) v.across.push_back(nearest_voxel(px, rect.width, n_across));
  for (int64_t py = 0; py < rect.height; ++py)
    v.up.push_back(n_up - 1 - nearest_voxel(py, rect.height, n_up));  // highest index at the top
  return v;
}

// Whether pixel (px, py) of a panel is on the region's outline: its voxel is inside, and in
// one of the four directions, within line_width pixels, the pixels first show the 4-neighbour
// voxel and that one is outside, or the panel ends. `inside(across, up)` says whether the
// voxel of the slice is inside.
template <class Inside>
bool on_outline(const PanelVoxels& v, int64_t px, int64_t py, int64_t line_width, const Inside& inside) {
  if (!inside(v.across[size_t(px)], v.up[size_t(py)])) return false;
  constexpr int64_t kSteps[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
  const int64_t width = int64_t(v.across.size()), height = int64_t(v.up.size());
  for (const auto& step : kSteps) {
    for (int64_t k = 1; k <= line_width; ++k) {
      const int64_t qx = px + k * step[0], qy = py + k * step[1];
      if (qx < 0 || qx >= width || qy < 0 || qy >= height) return true;  // the slice's edge
      const int64_t across = v.across[size_t(qx)], up = v.up[size_t(qy)];
      if (across == v.across[size_t(px)] && up == v.up[size_t(py)]) continue;  // still the same voxel
      if (!inside(across, up)) return true;
      break;
    }
  }
  return false;
}

}  // namespace

MontageLayout montage_layout(const Shape& shape, std::array<double, 3> spacing, int zoom) {
  GRIDNN_REQUIRE(shape.rank() == 3 && shape.numel() > 0, "montage: expected a volume shape [D, H, W], got ",
                 shape.str());
  for (double s : spacing)
    GRIDNN_REQUIRE(std::isfinite(s) && s > 0, "montage: voxel spacing ", spacing[0], " x ", spacing[1], " x ",
                   spacing[2], " mm must be positive");
  GRIDNN_REQUIRE(zoom >= 0, "montage: zoom ", zoom, " must be 0 (automatic) or positive");

  const double finest = *std::min_element(spacing.begin(), spacing.end());
  std::array<int64_t, 3> extent{};  // pixels per axis at zoom 1
  for (int a = 0; a < 3; ++a)
    extent[size_t(a)] = std::max<int64_t>(1, std::llround(double(shape[a]) * spacing[size_t(a)] / finest));

  MontageLayout layout;
  const int64_t tallest = std::max(extent[0], extent[1]);  // the panels' vertical axes are h and d
  layout.zoom = zoom > 0 ? zoom : std::max(1, int(std::lround(kTargetPanelHeight / double(tallest))));
  const int64_t panel_height = layout.zoom * tallest;
  layout.font_scale = std::max(1, int(std::lround(double(panel_height) / 150)));
  layout.margin = (kGlyphHeight + 4) * layout.font_scale;
  layout.line_width = layout.font_scale;

  int64_t x = 0;
  for (size_t p = 0; p < 3; ++p) {
    PanelRect& rect = layout.panels[p];
    rect.width = layout.zoom * extent[size_t(kPanelAxes[p].across)];
    rect.height = layout.zoom * extent[size_t(kPanelAxes[p].up)];
    rect.x = x + layout.margin;
    rect.y = layout.margin + (panel_height - rect.height) / 2;
    x += rect.width + 3 * layout.margin;  // its own two margins and a gap before the next
  }
  // x is now one margin past the sagittal panel's right margin: the bar, its ticks and labels.
  layout.bar = {x, layout.margin, layout.margin, panel_height};
  layout.width = x + layout.bar.width + (kTickLength + kTickGap) * layout.font_scale +
                 text_width("0.2", layout.font_scale) + layout.margin;
  layout.height = panel_height + 2 * layout.margin;
  return layout;
}

RgbImage render_montage(const Tensor& anatomy, const Tensor& heat, std::array<int64_t, 3> centre,
                        std::array<double, 3> spacing, int zoom, bool canonical, const Tensor& region) {
  require_volume(anatomy, "the anatomy");
  require_volume(heat, "the heat map");
  GRIDNN_REQUIRE(heat.shape() == anatomy.shape(), "render_montage: the heat map ", heat.shape().str(),
                 " and the anatomy ", anatomy.shape().str(), " differ in shape");
  GRIDNN_REQUIRE(!region.defined() ||
                     (region.dtype() == DType::f32 && region.device().is_cpu() && region.shape() == anatomy.shape()),
                 "render_montage: the region ", region.str(), " must be a CPU f32 mask of the anatomy's shape ",
                 anatomy.shape().str());
  const Shape& shape = anatomy.shape();
  for (int a = 0; a < 3; ++a)
    GRIDNN_REQUIRE(centre[size_t(a)] >= 0 && centre[size_t(a)] < shape[a], "render_montage: centre {", centre[0], ", ",
                   centre[1], ", ", centre[2], "} lies outside the volume ", shape.str());

  const MontageLayout layout = montage_layout(shape, spacing, zoom);
  const std::array<double, 2> win = window(anatomy);
  const float* anatomy_at = anatomy.data<float>();
  const float* heat_at = heat.data<float>();
  const float* region_at = region.defined() ? region.data<float>() : nullptr;
  RgbImage image = RgbImage::filled(layout.width, layout.height, Rgb{0, 0, 0});
  draw_colour_bar(image, layout);

  for (size_t p = 0; p < 3; ++p) {
    const PanelAxes axes = kPanelAxes[p];
    const PanelRect& rect = layout.panels[p];
    const PanelVoxels voxels = panel_voxels(rect, shape[axes.across], shape[axes.up]);
    auto offset = [&](int64_t across, int64_t up) {
      std::array<int64_t, 3> voxel = centre;
      voxel[size_t(axes.across)] = across;
      voxel[size_t(axes.up)] = up;
      return (voxel[0] * shape[1] + voxel[1]) * shape[2] + voxel[2];
    };
    auto inside = [&](int64_t across, int64_t up) { return region_at[offset(across, up)] > 0.5f; };
    for (int64_t py = 0; py < rect.height; ++py)
      for (int64_t px = 0; px < rect.width; ++px) {
        const int64_t i = offset(voxels.across[size_t(px)], voxels.up[size_t(py)]);
        const bool outline = region_at != nullptr && on_outline(voxels, px, py, layout.line_width, inside);
        image.set(rect.x + px, rect.y + py, outline ? kOutlineColour : blend(grey(anatomy_at[i], win), heat_at[i]));
      }
    if (!canonical) continue;  // the axes' directions are unknown: no letters
    const int scale = layout.font_scale;
    const std::array<char, 2> across_letters = kAxisLetters[size_t(axes.across)];
    const std::array<char, 2> up_letters = kAxisLetters[size_t(axes.up)];
    const int64_t mid_x = rect.x + rect.width / 2, mid_y = rect.y + rect.height / 2;
    draw_letter(image, rect.x - layout.margin / 2, mid_y, across_letters[0], scale);
    draw_letter(image, rect.x + rect.width + layout.margin / 2, mid_y, across_letters[1], scale);
    draw_letter(image, mid_x, rect.y - layout.margin / 2, up_letters[1], scale);
    draw_letter(image, mid_x, rect.y + rect.height + layout.margin / 2, up_letters[0], scale);
  }
  return image;
}

std::array<int64_t, 3> peak_voxel(const Tensor& heat) {
  GRIDNN_REQUIRE(heat.defined() && heat.rank() == 3 && heat.dtype() == DType::f32 && heat.device().is_cpu(),
                 "peak_voxel: expected a CPU f32 volume [D, H, W], got ",
                 heat.defined() ? heat.str() : std::string("an undefined tensor"));
  const float* v = heat.data<float>();
  int64_t best = -1;
  for (int64_t i = 0; i < heat.numel(); ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
  GRIDNN_REQUIRE(best >= 0, "peak_voxel: the volume ", heat.str(), " has no value that is not NaN");
  const int64_t H = heat.size(1), W = heat.size(2);
  return {best / (H * W), (best / W) % H, best % W};
}

}  // namespace gridnn::explain
