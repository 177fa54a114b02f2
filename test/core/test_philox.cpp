// Philox4x32-10 against the Random123 known-answer vectors, and the split-invariance of
// keyed draws that grid invariance relies on.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"

namespace gridnn {
namespace {

struct Kat {
  Philox4x32 ctr;
  uint32_t k0, k1;
  Philox4x32 expected;
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    Philox4x32 got = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.expected.v[i]) << "word " << i;
  }
}

TEST(Philox, UniformIsInUnitIntervalWithCorrectMoments) {
  const int n = 200000;
  double sum = 0, sumsq = 0;
  for (int i = 0; i < n; ++i) {
    float u = philox_uniform(42, 7, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sumsq += double(u) * u;
  }
  double mean = sum / n, var = sumsq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.005);  // sd of the mean: 0.29 / sqrt(n) = 6.5e-4
  EXPECT_NEAR(var, 1.0 / 12.0, 0.002);
}

TEST(Philox, NormalHasZeroMeanUnitVariance) {
  const int n = 200000;
  double sum = 0, sumsq = 0;
  for (int i = 0; i < n; ++i) {
    float z = philox_normal(3, 11, uint64_t(i));
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sumsq += double(z) * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sumsq / n, 1.0, 0.02);
}

TEST(Philox, EveryInputBitChangesTheOutput) {
  // Seed, stream and both halves of the 64-bit index all reach the counter or key.
  EXPECT_NE(philox_uniform(5, 9, 0), philox_uniform(6, 9, 0));                  // seed matters
  EXPECT_NE(philox_uniform(5, 9, 0), philox_uniform(5, 10, 0));                 // stream matters
  EXPECT_NE(philox_uniform(5, 9, 0), philox_uniform(5, 9, uint64_t(1) << 32));  // high index bits matter
  EXPECT_NE(philox_uniform(5, uint64_t(9) << 32, 0), philox_uniform(5, 0, 0));  // high stream bits
  EXPECT_NE(philox_uniform(uint64_t(5) << 32, 9, 0), philox_uniform(0, 9, 0));  // high seed bits
  // The words of one counter are not reused across neighbouring indices.
  EXPECT_NE(philox_words(1, 2, 0).v[1], philox_words(1, 2, 1).v[0]);
}

TEST(Philox, StreamIdsAreStableAndDistinct) {
  EXPECT_EQ(philox_stream_id("conv1.weight"), philox_stream_id("conv1.weight"));
  EXPECT_NE(philox_stream_id("conv1.weight"), philox_stream_id("conv2.weight"));
  EXPECT_EQ(philox_stream_id(""), 0xcbf29ce484222325ull);   // FNV-1a offset basis
  EXPECT_EQ(philox_stream_id("a"), 0xaf63dc4c8601ec8cull);  // FNV-1a 64 of "a"
}

}  // namespace
}  // namespace gridnn
