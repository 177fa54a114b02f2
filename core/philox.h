// Philox4x32-10 counter-based random numbers (Salmon et al., SC'11), host and device.
//
// gridnn keys every random value by (seed, stream, element index): `stream` names what is
// being drawn (a parameter, a sample, a dropout mask) and `index` is the element's index
// in the *global* (unsplit) tensor. A rank that holds a slice therefore draws exactly the
// values the single-process run draws for those elements (docs/design.md §2).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace gridnn {

struct Philox4x32 {
  uint32_t v[4];
};

GRIDNN_HD GRIDNN_INLINE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  *lo = uint32_t(p);
}

// The raw generator: 10 rounds over a 128-bit counter with a 64-bit key.
GRIDNN_HD GRIDNN_INLINE Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(kM1, ctr.v[2], &hi1, &lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// Four 32-bit random words for element `index` of stream `stream` under `seed`.
GRIDNN_HD GRIDNN_INLINE Philox4x32 philox_words(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4x32 ctr{{uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32)}};
  return philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32));
}

// Uniform in [0, 1), 24 random bits (every value exactly representable).
GRIDNN_HD GRIDNN_INLINE float philox_unit(uint32_t word) { return float(word >> 8) * (1.0f / 16777216.0f); }

// Uniform in [0, 1) for one element.
GRIDNN_HD GRIDNN_INLINE float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox_unit(philox_words(seed, stream, index).v[0]);
}

// Standard normal for one element (Box-Muller on two words of its counter).
GRIDNN_HD GRIDNN_INLINE float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4x32 w = philox_words(seed, stream, index);
  float u1 = float((w.v[0] >> 8) + 1u) * (1.0f / 16777216.0f);  // (0, 1]: log is finite
  float u2 = philox_unit(w.v[1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

// A 64-bit stream id from a name (FNV-1a), so "layer1.0.conv1.weight" always draws the
// same values whatever order the layers are built in.
inline uint64_t philox_stream_id(const char* name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* p = name; *p; ++p) {
    h ^= uint8_t(*p);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace gridnn
