// The synthetic dataset (determinism, slabs, labels, what distinguishes the classes, its
// quantized normal noise) and the batch loader (seeded order, shards, a start position, prefetch,
// errors from the background).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <set>

#include "core/philox.h"
#include "models/data/gaussian_noise.h"
#include "models/data/loader.h"
#include "models/data/synthetic.h"
#include "test/support/error_message.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using test::error_message;

data::SyntheticOptions small() {
  data::SyntheticOptions o;
  o.samples = 24;
  o.size = Shape{12, 10, 14};
  o.seed = 5;
  return o;
}

Tensor load(const data::Dataset& d, int64_t i, data::Augment a = {}, data::DepthSlab s = {}) {
  const Shape shape = d.sample_shape();
  const int64_t depth = (s.d_end < 0 ? shape[1] : s.d_end) - s.d_begin;
  Tensor x = Tensor::empty({shape[0], depth, shape[2], shape[3]});
  d.load(i, x, a, s);
  return x;
}

TEST(SyntheticData, DeterministicBySeedAndIndex) {
  data::SyntheticDataset a(small()), b(small());
  EXPECT_TRUE(test::tensors_equal(load(a, 3), load(b, 3)));
  EXPECT_FALSE(test::tensors_equal(load(a, 3), load(a, 4)));
  auto other = small();
  other.seed = 6;
  EXPECT_FALSE(test::tensors_equal(load(a, 3), load(data::SyntheticDataset(other), 3)));
}

TEST(SyntheticData, AugmentationDependsOnEpochOnly) {
  data::SyntheticDataset d(small());
  const data::Augment e0{true, 9, 0}, e1{true, 9, 1};
  EXPECT_TRUE(test::tensors_equal(load(d, 2, e0), load(d, 2, e0)));
  EXPECT_FALSE(test::tensors_equal(load(d, 2, e0), load(d, 2, e1)));
  EXPECT_FALSE(test::tensors_equal(load(d, 2, e0), load(d, 2)));
}

TEST(SyntheticData, SlabEqualsThePlanesOfTheFullSample) {
  auto o = small();
  o.channels = 2;
  data::SyntheticDataset d(o);
  const Tensor full = load(d, 7, {true, 1, 3});
  const Tensor slab = load(d, 7, {true, 1, 3}, {4, 9});
  const auto f = full.to_vector<float>(), s = slab.to_vector<float>();
  const int64_t plane = 10 * 14;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t z = 4; z < 9; ++z)
      for (int64_t i = 0; i < plane; ++i)
        ASSERT_EQ(s[size_t((c * 5 + z - 4) * plane + i)], f[size_t((c * 12 + z) * plane + i)]);
  EXPECT_NE(error_message([&] { load(d, 7, {}, {9, 13}); }).find("not inside the 12 planes"), std::string::npos);
}

TEST(SyntheticData, LabelsAlternateAndClassesDiffer) {
  auto o = small();
  o.samples = 64;
  o.noise = 0;
  o.size = Shape{24, 24, 24};
  data::SyntheticDataset d(o);
  // Class 1: larger dark cavities and a thinner bright shell -> fewer bright voxels and
  // more cavity voxels (brightness 0.15 x contrast), on average over many samples.
  double cavity[2] = {0, 0}, bright[2] = {0, 0};
  for (int64_t i = 0; i < o.samples; ++i) {
    EXPECT_EQ(d.label(i), i % 2);
    for (float v : load(d, i).to_vector<float>()) {
      cavity[i % 2] += v > 0.05f && v < 0.3f;
      bright[i % 2] += v > 0.8f;
    }
  }
  EXPECT_GT(cavity[1], 1.8 * cavity[0]);
  EXPECT_LT(bright[1], 0.8 * bright[0]);
}

TEST(SyntheticData, BadOptionsAndOutputs) {
  auto o = small();
  o.size = Shape{2, 10, 10};
  EXPECT_NE(error_message([&] { data::SyntheticDataset d(o); }).find("every side >= 4"), std::string::npos);
  data::SyntheticDataset d(small());
  Tensor wrong = Tensor::empty({1, 12, 10, 13});
  EXPECT_NE(error_message([&] { d.load(0, wrong, {}); }).find("must be a CPU f32 tensor [1, 12, 10, 14]"),
            std::string::npos);
  EXPECT_NE(error_message([&] { d.label(24); }).find("out of range"), std::string::npos);
}

TEST(GaussianNoise, TheTableIsTheNormalQuantiles) {
  // Reference: Phi^-1 by bisection on erfc, independent of the table's rational approximation.
  auto quantile = [](double p) {
    double lo = -10, hi = 10;
    for (int i = 0; i < 80; ++i) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  };
  const float* z = data::normal_quantiles();
  for (int k = 0; k < data::kNormalLevels; k += 7) {
    const double ref = quantile((k + 0.5) / data::kNormalLevels);
    ASSERT_NEAR(z[k], ref, 1e-6 * std::max(1.0, std::abs(ref))) << "level " << k;
  }
  for (int k = 0; k + 1 < data::kNormalLevels; ++k) ASSERT_LT(z[k], z[k + 1]) << "level " << k;
  for (int k = 0; k < data::kNormalLevels; ++k) ASSERT_EQ(z[k], -z[data::kNormalLevels - 1 - k]);
}

TEST(GaussianNoise, ItsMomentsAreTheNormalsAndASubRangeDrawsTheSameValues) {
  const int64_t n = 1 << 20;
  std::vector<float> x(n, 0.0f);
  data::add_gaussian_noise(11, 22, 1000, n, 1.0f, x.data());
  double m1 = 0, m2 = 0, m4 = 0, tail = 0;
  for (float v : x) {
    m1 += v;
    m2 += double(v) * v;
    m4 += double(v) * v * v * v;
    tail += std::abs(v) > 1.959964f;
  }
  m1 /= n, m2 /= n, m4 /= n, tail /= n;
  EXPECT_NEAR(m1, 0.0, 5.0 / std::sqrt(double(n)));
  EXPECT_NEAR(m2, 1.0, 0.01);
  EXPECT_NEAR(m4, 3.0, 0.05);
  EXPECT_NEAR(tail, 0.05, 0.002);
  // Elements 1000 + 4093 ... (not a multiple of the 8 per draw) added, scaled, onto ones.
  std::vector<float> y(1001, 1.0f);
  data::add_gaussian_noise(11, 22, 1000 + 4093, int64_t(y.size()), 0.5f, y.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], 1.0f + 0.5f * x[4093 + i]) << i;
  const float* z = data::normal_quantiles();
  // Each element is the table's level from its 16 bits of Philox word (seed, stream, i / 8):
  // a stream id above 2^32, counters crossing 2^32, starts and ends off the 8-element groups.
  for (const uint64_t first : {uint64_t(0), uint64_t(5), (uint64_t(1) << 35) - 101}) {
    const uint64_t seed = 0x0123456789ABCDEFull, stream = 0xFEDCBA9876543210ull;
    std::vector<float> v(300 + first % 7, 2.0f);
    data::add_gaussian_noise(seed, stream, first, int64_t(v.size()), 0.25f, v.data());
    for (size_t j = 0; j < v.size(); ++j) {
      const uint64_t i = first + j;
      const uint32_t word = philox_words(seed, stream, i / 8).v[(i % 8) / 2];
      const float level = z[(i % 2 ? word >> 16 : word) & 0xFFFFu];
      ASSERT_EQ(v[j], 2.0f + 0.25f * level) << "element " << i;
    }
  }
  std::vector<float> other(64, 0.0f);
  data::add_gaussian_noise(12, 22, 1000, 64, 1.0f, other.data());
  EXPECT_NE(std::vector<float>(x.begin(), x.begin() + 64), other);
}

TEST(SyntheticData, TheNoiseIsTheSampleLessItsAnatomy) {
  auto o = small();
  o.size = Shape{40, 40, 40};
  o.noise = 0.15f;
  auto clean = o;
  clean.noise = 0;
  const auto noisy = load(data::SyntheticDataset(o), 5).to_vector<float>();
  const auto anatomy = load(data::SyntheticDataset(clean), 5).to_vector<float>();
  double m1 = 0, m2 = 0;
  for (size_t i = 0; i < noisy.size(); ++i) {
    const double e = (noisy[i] - anatomy[i]) / 0.15;
    m1 += e;
    m2 += e * e;
  }
  m1 /= double(noisy.size()), m2 /= double(noisy.size());
  EXPECT_NEAR(m1, 0.0, 0.02);
  EXPECT_NEAR(m2 - m1 * m1, 1.0, 0.02);
}

TEST(Loader, EpochOrderIsASeededPermutation) {
  auto p = data::epoch_order(50, 3, 0);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(50);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(p, data::epoch_order(50, 3, 0));
  EXPECT_NE(p, data::epoch_order(50, 3, 1));
  EXPECT_NE(p, data::epoch_order(50, 4, 0));
  EXPECT_NE(p, iota);
}

TEST(Loader, BatchesFollowTheOrderAndCoverTheEpoch) {
  data::SyntheticDataset d(small());
  data::LoaderOptions o;
  o.batch = 5;
  o.seed = 11;
  data::BatchLoader loader(d, o);
  ASSERT_EQ(loader.batches_per_epoch(), 4);  // 24 samples, drop_last
  const auto order = data::epoch_order(24, 11, 0);
  for (int64_t b = 0; b < 4; ++b) {
    data::Batch batch = loader.next();
    ASSERT_EQ(batch.x.shape(), (Shape{5, 1, 12, 10, 14}));
    for (int64_t r = 0; r < 5; ++r) {
      EXPECT_EQ(batch.indices[size_t(r)], order[size_t(b * 5 + r)]);
      EXPECT_EQ(batch.y.to_vector<int64_t>()[size_t(r)], d.label(batch.indices[size_t(r)]));
    }
    Tensor row = batch.x.narrow(2, 1).reshape({1, 12, 10, 14});
    EXPECT_TRUE(test::tensors_equal(row, load(d, batch.indices[2])));
  }
  EXPECT_EQ(loader.position().epoch, 1);
  EXPECT_EQ(loader.position().batch, 0);
}

TEST(Loader, ShardsAndSlabsTileTheGlobalBatch) {
  data::SyntheticDataset d(small());
  data::LoaderOptions whole;
  whole.batch = 6;
  whole.augment = true;
  data::BatchLoader full(d, whole);
  const data::Batch ref = full.load({2, 1});
  const auto want = ref.x.to_vector<float>();
  // Rows [2, 5), depth planes [3, 7) of the same batch.
  data::LoaderOptions part = whole;
  part.shard_begin = 2;
  part.shard_end = 5;
  part.slab = {3, 7};
  data::BatchLoader shard(d, part);
  const data::Batch got = shard.load({2, 1});
  ASSERT_EQ(got.x.shape(), (Shape{3, 1, 4, 10, 14}));
  const auto g = got.x.to_vector<float>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t z = 0; z < 4; ++z)
      for (int64_t i = 0; i < 140; ++i)
        ASSERT_EQ(g[size_t((r * 4 + z) * 140 + i)], want[size_t(((r + 2) * 12 + z + 3) * 140 + i)]);
}

TEST(Loader, AStartPositionContinuesWithTheSameBatches) {
  data::SyntheticDataset d(small());
  data::LoaderOptions o;
  o.batch = 4;
  data::BatchLoader a(d, o), b(d, o, {1, 2});  // b starts there (a resumed run)
  for (int i = 0; i < 8; ++i) a.next();        // epoch 1, batch 2
  for (int i = 0; i < 6; ++i) {
    data::Batch x = a.next(), y = b.next();
    EXPECT_EQ(x.indices, y.indices);
    EXPECT_TRUE(test::tensors_equal(x.x, y.x));
  }
  EXPECT_THROW(data::BatchLoader(d, o, {0, 6}), Error);  // an epoch has 6 batches of 4
}

// A dataset whose sample 3 cannot be read.
class Broken : public data::SyntheticDataset {
 public:
  Broken() : SyntheticDataset(small()) {}
  int64_t load(int64_t index, Tensor& x, const data::Augment& a, const data::DepthSlab& s) const override {
    if (index == 3) throw Error("broken.nii: truncated");
    return SyntheticDataset::load(index, x, a, s);
  }
};

// Counts the loads that reach the dataset.
class Counting : public data::SyntheticDataset {
 public:
  Counting() : SyntheticDataset(small()) {}
  int64_t load(int64_t index, Tensor& x, const data::Augment& a, const data::DepthSlab& s) const override {
    ++loads;
    return SyntheticDataset::load(index, x, a, s);
  }
  mutable std::atomic<int> loads{0};
};

TEST(Loader, CacheLoadsEachSampleOnceAndGivesTheSameBatches) {
  Counting d;
  data::LoaderOptions o;
  o.batch = 6;
  o.slab = {2, 9};
  data::LoaderOptions c = o;
  c.cache = true;
  {
    data::BatchLoader plain(d, o), cached(d, c);
    for (int i = 0; i < 12; ++i) {  // three epochs of four batches
      const data::Batch a = plain.next(), b = cached.next();
      EXPECT_EQ(a.indices, b.indices);
      EXPECT_TRUE(test::tensors_equal(a.y, b.y));
      EXPECT_TRUE(test::tensors_equal(a.x, b.x));
    }
  }  // the loaders wait for their last prefetch
  // 12 batches of 6 without the cache, plus the prefetched one; 24 with it.
  EXPECT_EQ(d.loads.load(), 13 * 6 + 24);
  c.augment = true;
  EXPECT_NE(error_message([&] { data::BatchLoader l(d, c); }).find("--no-augment"), std::string::npos);
}

// Validation reads one epoch (LoaderOptions::one_epoch): its last batch, short here, is the
// last the loader reads; without it the next epoch's first is prefetched too.
TEST(Loader, OneEpochPrefetchesNothingPastItsEnd) {
  for (const bool one_epoch : {true, false}) {
    Counting d;
    data::LoaderOptions o;
    o.batch = 5;
    o.shuffle = false;
    o.drop_last = false;
    o.one_epoch = one_epoch;
    {
      data::BatchLoader loader(d, o);
      int64_t rows = 0;
      for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) rows += loader.next().y.size(0);
      EXPECT_EQ(rows, d.size());
    }  // the loader waits for its last prefetch
    EXPECT_EQ(d.loads.load(), d.size() + (one_epoch ? 0 : 5)) << "one_epoch " << one_epoch;
  }
}

TEST(Loader, BackgroundErrorsReachTheCaller) {
  Broken d;
  data::LoaderOptions o;
  o.batch = 24;
  o.shuffle = false;
  data::BatchLoader loader(d, o);
  EXPECT_EQ(error_message([&] { loader.next(); }), "broken.nii: truncated");
  o.batch = 30;
  EXPECT_NE(error_message([&] { data::BatchLoader l(d, o); }).find("fewer than one batch"), std::string::npos);
}

}  // namespace
}  // namespace gridnn
