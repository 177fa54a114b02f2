// The synthetic brain-like volumes (see synthetic.h for what they show).
#include "models/data/synthetic.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "models/data/gaussian_noise.h"

namespace gridnn::data {

namespace {

// What sample `id` looks like: drawn once from (seed, id), then voxels are evaluated.
struct Anatomy {
  double center[3];      // voxel coordinates (D, H, W)
  double radius[3];      // head radii in voxels
  double shell;          // cortex thickness as a fraction of the radius
  double cavity[3];      // ventricle radii in voxels
  double cavity_offset;  // ventricle centers at center +- this along W, in voxels
  float contrast;
};

const uint64_t kAnatomyStream = philox_stream_id("synthetic.anatomy");
const uint64_t kNoiseStream = philox_stream_id("synthetic.noise");
const uint64_t kAugmentStream = philox_stream_id("synthetic.augment");

Anatomy draw_anatomy(const SyntheticOptions& o, int64_t id, int64_t label, const Augment& augment) {
  auto u = [&](uint64_t k) {  // uniform in [-1, 1) for draw number k of this sample
    return 2.0 * philox_uniform(o.seed, kAnatomyStream, uint64_t(id) * 16 + k) - 1.0;
  };
  const double severity = o.classes > 1 ? double(label) / double(o.classes - 1) : 0.0;
  Anatomy a{};
  const double head = 0.36 * (1.0 + 0.08 * u(0));  // head radius as a fraction of each axis
  for (int d = 0; d < 3; ++d) {
    const double n = double(o.size[d]);
    double shift = 0.10 * n * u(1 + uint64_t(d));
    if (augment.enabled)
      shift += std::round(
          2.0 * philox_uniform(augment.seed ^ kAugmentStream, augment.epoch, uint64_t(id) * 4 + uint64_t(d)) - 1.0);
    a.center[d] = 0.5 * (n - 1) + shift;
    a.radius[d] = head * n;
  }
  a.shell = 0.22 * (1.0 - 0.45 * severity) * (1.0 + 0.1 * u(4));
  const double cavity = (1.0 + 0.6 * severity) * (1.0 + 0.15 * u(5));
  a.cavity[0] = 0.30 * a.radius[0] * cavity;
  a.cavity[1] = 0.40 * a.radius[1] * cavity;
  a.cavity[2] = 0.16 * a.radius[2] * cavity;
  a.cavity_offset = 0.24 * a.radius[2];
  a.contrast = float(1.0 + 0.15 * u(6));
  return a;
}

double squared(double v) { return v * v; }

// The anatomy along each axis, so that a voxel costs three sums: for every plane d, row h and
// column w the squared distance to the head's center and to the cavities' centers, each in
// units of its radius.
struct AxisTerms {
  std::vector<double> head[3];      // ((p - center) / radius)^2
  std::vector<double> cavity[2];    // ((p - center) / cavity)^2 along D and H
  std::vector<double> cavity_w[2];  // the same along W, for the cavity at -offset and at +offset
};

AxisTerms axis_terms(const Anatomy& a, const Shape& size) {
  AxisTerms t;
  for (int d = 0; d < 3; ++d)
    for (int64_t i = 0; i < size[d]; ++i) {
      t.head[d].push_back(squared((double(i) - a.center[d]) / a.radius[d]));
      if (d < 2) t.cavity[d].push_back(squared((double(i) - a.center[d]) / a.cavity[d]));
    }
  for (int s = 0; s < 2; ++s) {
    const double side = s == 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < size[2]; ++i)
      t.cavity_w[s].push_back(squared((double(i) - a.center[2] - side * a.cavity_offset) / a.cavity[2]));
  }
  return t;
}

// Brightness of voxel (d, h, w): shell 1.0, interior 0.6, cavities 0.15, outside 0.
float voxel(const Anatomy& a, const AxisTerms& t, int64_t d, int64_t h, int64_t w) {
  const double rho = t.head[0][d] + t.head[1][h] + t.head[2][w];
  if (rho >= 1.0) return 0.0f;
  const double cavity_dh = t.cavity[0][d] + t.cavity[1][h];
  if (cavity_dh + t.cavity_w[0][w] < 1.0 || cavity_dh + t.cavity_w[1][w] < 1.0) return 0.15f;
  return std::sqrt(rho) > 1.0 - a.shell ? 1.0f : 0.6f;
}

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options) : options_(options) {
  GRIDNN_REQUIRE(options_.samples >= 1, "synthetic data: need at least 1 sample, got ", options_.samples);
  GRIDNN_REQUIRE(options_.first_index >= 0, "synthetic data: first index must be >= 0");
  GRIDNN_REQUIRE(options_.classes >= 2, "synthetic data: need at least 2 classes, got ", options_.classes);
  GRIDNN_REQUIRE(options_.channels >= 1, "synthetic data: need at least 1 channel");
  GRIDNN_REQUIRE(options_.size.rank() == 3 && options_.size[0] >= 4 && options_.size[1] >= 4 && options_.size[2] >= 4,
                 "synthetic data: volume size must be D x H x W with every side >= 4, got ", options_.size.str());
  GRIDNN_REQUIRE(options_.noise >= 0, "synthetic data: noise must be >= 0");
}

Shape SyntheticDataset::sample_shape() const {
  return {options_.channels, options_.size[0], options_.size[1], options_.size[2]};
}

int64_t SyntheticDataset::label(int64_t index) const {
  GRIDNN_REQUIRE(index >= 0 && index < options_.samples, "synthetic data: sample ", index, " out of range [0, ",
                 options_.samples, ")");
  return (options_.first_index + index) % options_.classes;
}

std::string SyntheticDataset::describe(int64_t index) const {
  return "synthetic sample " + std::to_string(options_.first_index + index);
}

int64_t SyntheticDataset::load(int64_t index, Tensor& x, const Augment& augment, const DepthSlab& slab) const {
  const int64_t y = label(index);
  const SlabRange r = check_sample_output("synthetic data", sample_shape(), slab, x);
  const int64_t id = options_.first_index + index;
  const Anatomy a = draw_anatomy(options_, id, y, augment);
  const int64_t H = options_.size[1], W = options_.size[2];
  const uint64_t volume = uint64_t(options_.size[0] * H * W);
  // Fresh noise per epoch when augmenting; the sample's own noise otherwise.
  const uint64_t noise_seed =
      augment.enabled ? augment.seed ^ (augment.epoch + 1) * 0x9E3779B97F4A7C15ull : options_.seed;
  const AxisTerms terms = axis_terms(a, options_.size);
  float* out = x.data<float>();
  for (int64_t d = r.begin; d < r.end; ++d)
    for (int64_t h = 0; h < H; ++h) {
      float* row = out + ((d - r.begin) * H + h) * W;
      for (int64_t w = 0; w < W; ++w) row[w] = a.contrast * voxel(a, terms, d, h, w);
    }
  add_gaussian_noise(noise_seed, kNoiseStream, uint64_t(id) * volume + uint64_t(r.begin * H * W),
                     (r.end - r.begin) * H * W, options_.noise, out);
  // Every channel the same volume.
  const int64_t plane = (r.end - r.begin) * H * W;
  for (int64_t c = 1; c < options_.channels; ++c) std::copy(out, out + plane, out + c * plane);
  return y;
}

}  // namespace gridnn::data
