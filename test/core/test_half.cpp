// f16 and bf16 conversions against values computed by hand from the IEEE formats.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/half.h"

namespace gridnn {
namespace {

TEST(F16, ExactValuesAndBitPatterns) {
  EXPECT_EQ(f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(f16(-2.0f).bits, 0xc000);
  EXPECT_EQ(f16(0.5f).bits, 0x3800);
  EXPECT_EQ(f16(65504.0f).bits, 0x7bff);                 // largest finite
  EXPECT_EQ(f16(6.103515625e-05f).bits, 0x0400);         // smallest normal 2^-14
  EXPECT_EQ(f16(5.9604644775390625e-08f).bits, 0x0001);  // smallest subnormal 2^-24
  EXPECT_EQ(f16(0.0f).bits, 0x0000);
  EXPECT_EQ(f16(-0.0f).bits, 0x8000);
}

TEST(F16, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(f16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties to even (0x3c02).
  EXPECT_EQ(f16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_EQ(f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)).bits, 0x3c01);
  // Halfway between 0 and the smallest subnormal rounds to 0 (even); a bit more rounds up.
  EXPECT_EQ(f16(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(f16(std::ldexp(1.0f, -25) * 1.01f).bits, 0x0001);
  EXPECT_EQ(f16(3 * std::ldexp(1.0f, -25)).bits, 0x0002);  // 1.5 units: ties to even 2
}

TEST(F16, OverflowInfinityAndNaN) {
  EXPECT_EQ(f16(65520.0f).bits, 0x7c00);  // rounds past the largest finite
  EXPECT_EQ(f16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(f16(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(f16(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_TRUE(std::isnan(float(f16(std::nanf("")))));
}

TEST(F16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t bits = uint16_t(b);
    float f = f16::to_float(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f16::from_float(f), bits) << "bits 0x" << std::hex << b;
  }
}

TEST(BF16, RoundingAndSpecials) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(-3.0f).bits, 0xc040);
  EXPECT_EQ(float(bf16(3.140625f)), 3.140625f);  // exactly representable
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even.
  EXPECT_EQ(bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(float(bf16(std::nanf("")))));
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to inf
}

}  // namespace
}  // namespace gridnn
