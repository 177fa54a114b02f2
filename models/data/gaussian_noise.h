// Standard normal noise for the data generators, fast enough to keep up with a training step.
//
// Element i of (seed, stream) is the inverse normal CDF at (k + 0.5) / 65536, where k is 16
// bits of Philox4x32-10 word (seed, stream, i / 8): one Philox call gives 8 elements, and no
// logarithm or cosine is evaluated per element. The values are the standard normal quantized
// to 65536 equally likely levels, so |z| <= 4.17 (the 1 - 0.5/65536 quantile); their mean is 0
// and their variance 0.99988. As with every Philox draw in gridnn, an element's value depends
// only on (seed, stream, i), so any sub-range (a rank's depth slab) draws exactly the values
// of the whole (docs/design.md §2).
#pragma once

#include <cstdint>

namespace gridnn::data {

constexpr int kNormalLevels = 65536;

// The table: entry k is the standard normal quantile at (k + 0.5) / kNormalLevels (entry
// kNormalLevels - 1 - k is exactly minus entry k). Built once, on first use.
const float* normal_quantiles();

// out[j] += scale * z(first + j) for j < n: elements first ... first + n - 1 of (seed, stream).
void add_gaussian_noise(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, float scale, float* out);

}  // namespace gridnn::data
