// 16-bit floating-point storage types: IEEE binary16 (f16) and bfloat16 (bf16).
//
// Both are plain 16-bit containers with conversions to and from float written once
// for host and device, so CPU and GPU produce bit-identical conversions. Arithmetic
// is always done in float (fp32 accumulation), as docs/design.md §2 asks for mixed precision.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace gridnn {

GRIDNN_HD GRIDNN_INLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

GRIDNN_HD GRIDNN_INLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  GRIDNN_HD explicit bf16(float f) : bits(from_float(f)) {}
  GRIDNN_HD explicit operator float() const { return bits_float(uint32_t(bits) << 16); }

  // Round to nearest even; NaN stays NaN (quiet), infinities pass through.
  GRIDNN_HD static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return uint16_t((u + rounding) >> 16);
  }
};

struct f16 {
  uint16_t bits = 0;

  f16() = default;
  GRIDNN_HD explicit f16(float f) : bits(from_float(f)) {}
  GRIDNN_HD explicit operator float() const { return to_float(bits); }

  // IEEE binary16 with round to nearest even, subnormals, overflow to infinity.
  GRIDNN_HD static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
    if (mag >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (mag < 0x38800000u) {                                  // below 2^-14: subnormal or zero
      if (mag < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
      uint32_t exp = mag >> 23;
      uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
      // value = mant * 2^(exp - 150) and the subnormal unit is 2^-24: keep mant >> (126 - exp).
      uint32_t shift = 126u - exp;
      uint32_t half_mant = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1u);
      uint32_t halfway = 1u << (shift - 1u);
      if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
      return uint16_t(sign | half_mant);
    }
    // Normal: rebias exponent from 127 to 15, round mantissa from 23 to 10 bits.
    uint32_t v = mag - 0x38000000u;  // subtract (127 - 15) << 23
    uint32_t rounding = 0xfffu + ((v >> 13) & 1u);
    return uint16_t(sign | ((v + rounding) >> 13));
  }

  GRIDNN_HD static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
    if (exp == 0) {
      if (mant == 0) return bits_float(sign);
      // Subnormal: mant * 2^-24, exact in float.
      float v = float(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

// Conversions used by templated bodies: to_float(x) / from_float<T>(f).
GRIDNN_HD GRIDNN_INLINE float to_float(float x) { return x; }
GRIDNN_HD GRIDNN_INLINE float to_float(bf16 x) { return float(x); }
GRIDNN_HD GRIDNN_INLINE float to_float(f16 x) { return float(x); }

template <class T>
GRIDNN_HD GRIDNN_INLINE T from_float(float f) {
  return T(f);
}

}  // namespace gridnn
