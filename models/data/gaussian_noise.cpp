// Quantized standard normal noise (see gaussian_noise.h).
#include "models/data/gaussian_noise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"

namespace gridnn::data {

namespace {

// The standard normal quantile for p in (0, 0.5]: Acklam's rational approximation (relative
// error below 1.2e-9), then one Halley step on Phi(x) - p with erfc, to double precision.
double normal_quantile_lower(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2.0 * M_PI) * std::exp(0.5 * x * x);
  return x - u / (1.0 + 0.5 * x * u);
}

std::vector<float> build_quantiles() {
  std::vector<float> z(kNormalLevels);
  for (int k = 0; k < kNormalLevels / 2; ++k) {
    z[k] = float(normal_quantile_lower((k + 0.5) / kNormalLevels));
    z[kNormalLevels - 1 - k] = -z[k];
  }
  return z;
}

}  // namespace

const float* normal_quantiles() {
  static const std::vector<float> table = build_quantiles();
  return table.data();
}

namespace {

// Elements [i, end) of one Philox call's group of 8 (i / 8 == (end - 1) / 8), one by one.
void add_partial_group(uint64_t seed, uint64_t stream, uint64_t i, uint64_t end, float scale, const float* z,
                       float* out) {
  // Word j of call i / 8 holds elements 2j (low 16 bits) and 2j + 1 (high 16 bits).
  const Philox4x32 w = philox_words(seed, stream, i / 8);
  for (; i < end; ++i) {
    const unsigned lane = unsigned(i % 8);
    *out++ += scale * z[(w.v[lane / 2] >> (16 * (lane % 2))) & 0xFFFFu];
  }
}

// kCalls whole groups from call `call` on: the Philox rounds of philox4x32_10 written
// over arrays of kCalls counters, so that each step is one loop the compiler vectorizes.
// The 32-bit words live in 64-bit lanes, where the 32 x 32 -> 64-bit products are plain
// 64-bit multiplies (GCC 12 does not vectorize a widening multiply's high half). The same
// words as philox_words, bit for bit.
constexpr int kCalls = 16;

void add_whole_groups(uint32_t key0, uint32_t key1, uint64_t stream, uint64_t call, float scale, const float* z,
                      float* out) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kLow = 0xFFFFFFFFu;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint64_t v0[kCalls], v1[kCalls], v2[kCalls], v3[kCalls];
  for (int c = 0; c < kCalls; ++c) {
    v0[c] = (call + uint64_t(c)) & kLow;
    v1[c] = (call + uint64_t(c)) >> 32;
    v2[c] = stream & kLow;
    v3[c] = stream >> 32;
  }
  uint32_t k0 = key0, k1 = key1;
  for (int round = 0; round < 10; ++round) {
    for (int c = 0; c < kCalls; ++c) {
      const uint64_t p0 = kM0 * v0[c], p1 = kM1 * v2[c];
      v0[c] = (p1 >> 32) ^ v1[c] ^ k0;
      v2[c] = (p0 >> 32) ^ v3[c] ^ k1;
      v1[c] = p1 & kLow;
      v3[c] = p0 & kLow;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int c = 0; c < kCalls; ++c) {
    const uint32_t w[4] = {uint32_t(v0[c]), uint32_t(v1[c]), uint32_t(v2[c]), uint32_t(v3[c])};
    float* o = out + 8 * c;
    for (int j = 0; j < 4; ++j) {
      o[2 * j] += scale * z[w[j] & 0xFFFFu];
      o[2 * j + 1] += scale * z[w[j] >> 16];
    }
  }
}

}  // namespace

void add_gaussian_noise(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, float scale, float* out) {
  const float* z = normal_quantiles();
  uint64_t i = first;
  const uint64_t end = first + uint64_t(n);
  // The head up to a group boundary, then kCalls groups at a time, then what is left.
  if (i % 8 != 0) {
    const uint64_t stop = std::min(end, (i / 8 + 1) * 8);
    add_partial_group(seed, stream, i, stop, scale, z, out);
    out += stop - i;
    i = stop;
  }
  for (; i + 8 * kCalls <= end; i += 8 * kCalls, out += 8 * kCalls)
    add_whole_groups(uint32_t(seed), uint32_t(seed >> 32), stream, i / 8, scale, z, out);
  while (i < end) {
    const uint64_t stop = std::min(end, (i / 8 + 1) * 8);
    add_partial_group(seed, stream, i, stop, scale, z, out);
    out += stop - i;
    i = stop;
  }
}

}  // namespace gridnn::data
