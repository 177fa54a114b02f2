#include "models/data/volume_transforms.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace gridnn::data {
namespace {

void require_volume(const Tensor& volume, const char* op) {
  GRIDNN_REQUIRE(volume.defined() && volume.rank() == 3 && volume.dtype() == DType::f32 && volume.device().is_cpu(), op,
                 ": expected a CPU f32 volume [D, H, W], got ",
                 volume.defined() ? volume.str() : std::string("an undefined tensor"));
}

void require_target(const std::array<int64_t, 3>& target, const char* op) {
  GRIDNN_REQUIRE(target[0] > 0 && target[1] > 0 && target[2] > 0, op, ": target size ", target[0], "x", target[1], "x",
                 target[2], " must be positive in every axis");
}

// One axis of a trilinear resampling: output index o reads source indices lo[o] and
// lo[o] + 1 with weights 1 - frac[o] and frac[o] (lo[o] + 1 clamped to the last index).
struct AxisSamples {
  std::vector<int64_t> lo, hi;
  std::vector<double> frac;
};

AxisSamples axis_samples(int64_t n, int64_t t) {
  AxisSamples s;
  s.lo.resize(size_t(t));
  s.hi.resize(size_t(t));
  s.frac.resize(size_t(t));
  for (int64_t o = 0; o < t; ++o) {
    const double x = t == 1 ? double(n - 1) / 2.0 : double(o) * double(n - 1) / double(t - 1);
    const int64_t lo = std::min(int64_t(std::floor(x)), n - 1);
    s.lo[size_t(o)] = lo;
    s.hi[size_t(o)] = std::min(lo + 1, n - 1);
    s.frac[size_t(o)] = x - double(lo);
  }
  return s;
}

// Along an axis of size n, output index o samples scale * o + offset clamped to [0, n - 1].
AxisSamples axis_samples_at(int64_t n, int64_t t, double scale, double offset) {
  AxisSamples s;
  s.lo.resize(size_t(t));
  s.hi.resize(size_t(t));
  s.frac.resize(size_t(t));
  for (int64_t o = 0; o < t; ++o) {
    const double x = std::clamp(scale * double(o) + offset, 0.0, double(n - 1));
    const int64_t lo = std::min(int64_t(std::floor(x)), n - 1);
    s.lo[size_t(o)] = lo;
    s.hi[size_t(o)] = std::min(lo + 1, n - 1);
    s.frac[size_t(o)] = x - double(lo);
  }
  return s;
}

// Trilinear resampling with the given per-axis samples.
Tensor resample_with(const Tensor& volume, const std::array<int64_t, 3>& target, const AxisSamples& sd,
                     const AxisSamples& sh, const AxisSamples& sw) {
  const int64_t H = volume.size(1), W = volume.size(2);
  Tensor out = Tensor::empty({target[0], target[1], target[2]});
  const float* in = volume.data<float>();
  float* dst = out.data<float>();
  auto at = [&](int64_t d, int64_t h, int64_t w) { return double(in[(d * H + h) * W + w]); };
  for (int64_t od = 0; od < target[0]; ++od) {
    const int64_t d0 = sd.lo[size_t(od)], d1 = sd.hi[size_t(od)];
    const double fd = sd.frac[size_t(od)];
    for (int64_t oh = 0; oh < target[1]; ++oh) {
      const int64_t h0 = sh.lo[size_t(oh)], h1 = sh.hi[size_t(oh)];
      const double fh = sh.frac[size_t(oh)];
      for (int64_t ow = 0; ow < target[2]; ++ow) {
        const int64_t w0 = sw.lo[size_t(ow)], w1 = sw.hi[size_t(ow)];
        const double fw = sw.frac[size_t(ow)];
        auto along_w = [&](int64_t d, int64_t h) { return at(d, h, w0) * (1.0 - fw) + at(d, h, w1) * fw; };
        const double plane0 = along_w(d0, h0) * (1.0 - fh) + along_w(d0, h1) * fh;
        const double plane1 = along_w(d1, h0) * (1.0 - fh) + along_w(d1, h1) * fh;
        dst[(od * target[1] + oh) * target[2] + ow] = float(plane0 * (1.0 - fd) + plane1 * fd);
      }
    }
  }
  return out;
}

}  // namespace

Tensor center_crop_or_pad(const Tensor& volume, const std::array<int64_t, 3>& target) {
  require_volume(volume, "center_crop_or_pad");
  require_target(target, "center_crop_or_pad");
  const int64_t n[3] = {volume.size(0), volume.size(1), volume.size(2)};
  int64_t shift[3];
  for (int a = 0; a < 3; ++a) shift[a] = n[a] >= target[a] ? (n[a] - target[a]) / 2 : -((target[a] - n[a]) / 2);
  Tensor out = Tensor::zeros({target[0], target[1], target[2]});
  const float* in = volume.data<float>();
  float* dst = out.data<float>();
  // Output range [o_begin, o_end) of each axis whose source index o + shift is in bounds.
  int64_t o_begin[3], o_end[3];
  for (int a = 0; a < 3; ++a) {
    o_begin[a] = std::max<int64_t>(0, -shift[a]);
    o_end[a] = std::min<int64_t>(target[a], n[a] - shift[a]);
  }
  for (int64_t d = o_begin[0]; d < o_end[0]; ++d)
    for (int64_t h = o_begin[1]; h < o_end[1]; ++h) {
      const float* src = in + ((d + shift[0]) * n[1] + (h + shift[1])) * n[2] + (o_begin[2] + shift[2]);
      std::copy(src, src + (o_end[2] - o_begin[2]), dst + (d * target[1] + h) * target[2] + o_begin[2]);
    }
  return out;
}

Tensor resample_trilinear(const Tensor& volume, const std::array<int64_t, 3>& target) {
  require_volume(volume, "resample_trilinear");
  require_target(target, "resample_trilinear");
  return resample_with(volume, target, axis_samples(volume.size(0), target[0]), axis_samples(volume.size(1), target[1]),
                       axis_samples(volume.size(2), target[2]));
}

Tensor resample_trilinear_at(const Tensor& volume, const std::array<int64_t, 3>& target,
                             const std::array<double, 3>& scale, const std::array<double, 3>& offset) {
  require_volume(volume, "resample_trilinear_at");
  require_target(target, "resample_trilinear_at");
  for (int a = 0; a < 3; ++a)
    GRIDNN_REQUIRE(std::isfinite(scale[a]) && std::isfinite(offset[a]),
                   "resample_trilinear_at: non-finite scale or offset on axis ", a);
  return resample_with(volume, target, axis_samples_at(volume.size(0), target[0], scale[0], offset[0]),
                       axis_samples_at(volume.size(1), target[1], scale[1], offset[1]),
                       axis_samples_at(volume.size(2), target[2], scale[2], offset[2]));
}

void zscore_(Tensor& volume) {
  require_volume(volume, "zscore_");
  float* x = volume.data<float>();
  const int64_t n = volume.numel();
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double squares = 0.0;
  for (int64_t i = 0; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const double stddev = std::sqrt(squares / double(n));
  const double scale = stddev > 0.0 ? 1.0 / stddev : 1.0;
  for (int64_t i = 0; i < n; ++i) x[i] = float((x[i] - mean) * scale);
}

void flip_(Tensor& volume, const std::array<bool, 3>& axes) {
  require_volume(volume, "flip_");
  const int64_t D = volume.size(0), H = volume.size(1), W = volume.size(2);
  float* x = volume.data<float>();
  if (axes[2])
    for (int64_t row = 0; row < D * H; ++row) std::reverse(x + row * W, x + (row + 1) * W);
  if (axes[1])
    for (int64_t d = 0; d < D; ++d)
      for (int64_t h = 0; h < H / 2; ++h)
        std::swap_ranges(x + (d * H + h) * W, x + (d * H + h + 1) * W, x + (d * H + (H - 1 - h)) * W);
  if (axes[0])
    for (int64_t d = 0; d < D / 2; ++d) std::swap_ranges(x + d * H * W, x + (d + 1) * H * W, x + (D - 1 - d) * H * W);
}

}  // namespace gridnn::data
