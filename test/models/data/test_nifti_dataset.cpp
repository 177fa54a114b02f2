// NiftiDataset (models/data/nifti_dataset.h) on small volumes written by the test: crop and
// pad, trilinear resampling (exact for multilinear functions), z-scores, flips against the
// documented Philox rule, depth slabs, splits, labels and messages.
#include <gtest/gtest.h>
#include <nifti2_io.h>

#include <array>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/philox.h"
#include "models/data/nifti_dataset.h"
#include "test/models/data/data_test_support.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/error_message.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using data::Augment;
using data::DepthSlab;
using data::Fit;
using data::Manifest;
using data::NiftiDataset;
using data::NiftiDatasetOptions;
using data::Split;
using test::contains;
using test::error_message;
using Voxel = std::function<double(int64_t i, int64_t j, int64_t k)>;

class NiftiDatasetTest : public test::ScratchDirTest {
 protected:
  // Writes a float32 volume of dims {W, H, D} with voxel (i, j, k) = f(i, j, k).
  std::string write_volume(const std::string& name, std::array<int64_t, 3> whd, const Voxel& f) {
    std::vector<double> values;
    for (int64_t k = 0; k < whd[2]; ++k)
      for (int64_t j = 0; j < whd[1]; ++j)
        for (int64_t i = 0; i < whd[0]; ++i) values.push_back(f(i, j, k));
    test::NiftiSpec spec;
    spec.dims = {whd[0], whd[1], whd[2]};
    spec.datatype = NIFTI_TYPE_FLOAT32;
    test::write_nifti1(path(name), spec, values);
    return path(name);
  }
  // A one-row dataset over `file`.
  static NiftiDataset one_volume(const std::string& file, NiftiDatasetOptions options) {
    Manifest m;
    m.source = "test.csv";
    m.rows.push_back({file, 0, Split::unassigned, 2});
    return NiftiDataset(m, options);
  }
  static Tensor load(const NiftiDataset& ds, int64_t index, const Augment& augment = {}, const DepthSlab& slab = {}) {
    const Shape s = ds.sample_shape();
    const int64_t depth = (slab.d_end < 0 ? s[1] : slab.d_end) - slab.d_begin;
    Tensor x = Tensor::empty({s[0], depth, s[2], s[3]});
    ds.load(index, x, augment, slab);
    return x;
  }
};

// Expects x [1, D, H, W] to equal expected(d, h, w) within tol.
void expect_sample(const Tensor& x, const std::function<double(int64_t, int64_t, int64_t)>& expected,
                   double tol = 0.0) {
  const int64_t D = x.size(1), H = x.size(2), W = x.size(3);
  const float* p = x.data<float>();
  for (int64_t d = 0; d < D; ++d)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        ASSERT_NEAR(p[(d * H + h) * W + w], expected(d, h, w), tol) << "d=" << d << " h=" << h << " w=" << w;
}

double ramp(int64_t i, int64_t j, int64_t k) { return double(i + 10 * j + 100 * k + 1); }

TEST_F(NiftiDatasetTest, CenterCropAndPadPerAxis) {
  // File W=6, H=3, D=5 -> target D=2 (crop: keeps k = 1, 2), H=6 (pad: 1 before, 2 after),
  // W=6 (unchanged).
  const std::string file = write_volume("v.nii", {6, 3, 5}, ramp);
  NiftiDatasetOptions options;
  options.target = {2, 6, 6};
  options.normalize = false;
  const NiftiDataset ds = one_volume(file, options);
  EXPECT_EQ(ds.sample_shape(), Shape({1, 2, 6, 6}));
  expect_sample(load(ds, 0), [](int64_t d, int64_t h, int64_t w) {
    const int64_t k = d + 1, j = h - 1, i = w;
    return (j >= 0 && j < 3) ? ramp(i, j, k) : 0.0;
  });

  // Odd differences the other way: D 5 -> 8 pads 1 before and 2 after; W 6 -> 3 keeps 1..3.
  options.target = {8, 3, 3};
  expect_sample(load(one_volume(file, options), 0), [](int64_t d, int64_t h, int64_t w) {
    const int64_t k = d - 1, j = h, i = w + 1;
    return (k >= 0 && k < 5) ? ramp(i, j, k) : 0.0;
  });
}

// Trilinear interpolation reproduces any function that is linear in each index separately.
double multilinear(double i, double j, double k) { return (i + 1) * (j + 2) - 3 * k * i + k - 0.5 * j * k; }

TEST_F(NiftiDatasetTest, ResampleIsExactForMultilinearVolumes) {
  const std::string file = write_volume("v.nii.gz", {3, 4, 5}, [](int64_t i, int64_t j, int64_t k) {
    return multilinear(double(i), double(j), double(k));
  });
  NiftiDatasetOptions options;
  options.fit = Fit::resample;
  options.normalize = false;
  // Corner-aligned source coordinates, worked out by hand from o * (n - 1) / (t - 1):
  // D 5 -> 9: k = d / 2; H 4 -> 7: j = h / 2; W 3 -> 2: i = 2 w.
  options.target = {9, 7, 2};
  expect_sample(
      load(one_volume(file, options), 0),
      [](int64_t d, int64_t h, int64_t w) { return multilinear(2.0 * double(w), double(h) / 2.0, double(d) / 2.0); },
      1e-4);
  // D 5 -> 1: the middle, k = 2; H 4 -> 4: j = h; W 3 -> 5: i = w / 2.
  options.target = {1, 4, 5};
  expect_sample(
      load(one_volume(file, options), 0),
      [](int64_t, int64_t h, int64_t w) { return multilinear(double(w) / 2.0, double(h), 2.0); }, 1e-4);
  // D 5 -> 3: k = 2 d; H 4 -> 3: j = 1.5 h; W 3 -> 3: i = w.
  options.target = {3, 3, 3};
  expect_sample(
      load(one_volume(file, options), 0),
      [](int64_t d, int64_t h, int64_t w) { return multilinear(double(w), 1.5 * double(h), 2.0 * double(d)); }, 1e-4);
}

TEST_F(NiftiDatasetTest, ZScoreOverTheFittedVolume) {
  const std::string file = write_volume("v.nii", {4, 3, 2}, [](int64_t i, int64_t j, int64_t k) {
    return std::exp(0.3 * double(i)) + double(j * j) - 2.0 * double(k);
  });
  NiftiDatasetOptions options;
  options.target = {2, 3, 6};  // W padded by 1 voxel each side: the zeros count too
  const Tensor x = load(one_volume(file, options), 0);
  // Reference: mean and population std of the padded volume, in double.
  std::vector<double> v;
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 6; ++w)
        v.push_back(w >= 1 && w <= 4 ? double(float(std::exp(0.3 * double(w - 1)) + double(h * h) - 2.0 * double(d)))
                                     : 0.0);
  double mean = 0, var = 0;
  for (double e : v) mean += e / double(v.size());
  for (double e : v) var += (e - mean) * (e - mean) / double(v.size());
  const double stddev = std::sqrt(var);
  expect_sample(
      x, [&](int64_t d, int64_t h, int64_t w) { return (v[size_t((d * 3 + h) * 6 + w)] - mean) / stddev; }, 1e-5);
  const std::vector<double> got = test::to_doubles(x);
  double got_mean = 0, got_var = 0;
  for (double e : got) got_mean += e / double(got.size());
  for (double e : got) got_var += (e - got_mean) * (e - got_mean) / double(got.size());
  EXPECT_NEAR(got_mean, 0.0, 1e-6);
  EXPECT_NEAR(got_var, 1.0, 1e-5);

  // A constant volume: only the mean is subtracted.
  const std::string flat = write_volume("flat.nii", {4, 3, 2}, [](int64_t, int64_t, int64_t) { return 5.0; });
  options.target = {2, 3, 4};
  expect_sample(load(one_volume(flat, options), 0), [](int64_t, int64_t, int64_t) { return 0.0; });
}

// The flips the header documents, drawn here from Philox directly.
std::array<bool, 3> documented_flips(const Augment& a, int64_t index) {
  const Philox4x32 w = philox_words(a.seed, philox_stream_id("data.flip") + a.epoch, uint64_t(index));
  return {philox_unit(w.v[0]) < 0.5f, philox_unit(w.v[1]) < 0.5f, philox_unit(w.v[2]) < 0.5f};
}

TEST_F(NiftiDatasetTest, FlipsFollowThePhiloxRuleAndAreDeterministic) {
  const std::string file = write_volume("v.nii", {4, 3, 5}, ramp);
  Manifest m;
  m.source = "test.csv";
  for (int r = 0; r < 3; ++r) m.rows.push_back({file, r % 2, Split::unassigned, r + 1});
  NiftiDatasetOptions options;
  options.target = {5, 3, 4};
  options.normalize = false;
  const NiftiDataset ds(m, options);
  std::set<std::array<bool, 3>> patterns;
  for (uint64_t epoch = 0; epoch < 6; ++epoch)
    for (int64_t index = 0; index < 3; ++index) {
      const Augment augment{true, 42, epoch};
      const std::array<bool, 3> flip = documented_flips(augment, index);
      patterns.insert(flip);
      const Tensor x = load(ds, index, augment);
      expect_sample(x, [&](int64_t d, int64_t h, int64_t w) {
        return ramp(flip[2] ? 3 - w : w, flip[1] ? 2 - h : h, flip[0] ? 4 - d : d);
      });
      EXPECT_TRUE(test::tensors_equal(load(ds, index, augment), x));  // same key, same sample
    }
  EXPECT_GE(patterns.size(), 4u);  // the draws really vary with epoch and index
  // Augmentation off: the plain volume, whatever the key.
  expect_sample(load(ds, 1, Augment{false, 42, 3}), [](int64_t d, int64_t h, int64_t w) { return ramp(w, h, d); });
}

TEST_F(NiftiDatasetTest, DepthSlabEqualsThePlanesOfTheFullSample) {
  const std::string file = write_volume(
      "v.nii.gz", {5, 4, 7}, [](int64_t i, int64_t j, int64_t k) { return std::sin(double(i + 3 * j + 7 * k)); });
  NiftiDatasetOptions options;
  options.target = {6, 6, 4};
  options.fit = Fit::resample;
  const NiftiDataset ds = one_volume(file, options);
  for (const Augment& augment : {Augment{}, Augment{true, 7, 1}, Augment{true, 7, 2}}) {
    const Tensor full = load(ds, 0, augment);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 6}, {2, 5}, {5, 6}, {0, 1}}) {
      const Tensor slab = load(ds, 0, augment, DepthSlab{begin, end});
      const Tensor planes = full.reshape({6, 6, 4}).narrow(begin, end - begin).reshape({1, end - begin, 6, 4});
      EXPECT_TRUE(test::tensors_equal(slab, planes.clone())) << begin << ".." << end;
    }
  }
  Tensor wrong = Tensor::empty({1, 3, 6, 4});
  EXPECT_TRUE(contains(error_message([&] { ds.load(0, wrong, {}, DepthSlab{4, 8}); }), "depth slab [4, 8)"));
}

TEST_F(NiftiDatasetTest, SplitsLabelsAndMessages) {
  const std::string a = write_volume("a.nii", {2, 2, 2}, ramp);
  write_text(path("list.csv"),
             "path,label,split\n"
             "a.nii,0,train\n"
             "missing.nii,3,train\n"
             "a.nii,1,val\n");
  NiftiDatasetOptions options;
  options.target = {2, 2, 2};
  const NiftiDataset all = NiftiDataset::from_csv(path("list.csv"), options);
  EXPECT_EQ(all.size(), 3);
  EXPECT_EQ(all.num_classes(), 4);
  EXPECT_EQ(all.label(1), 3);
  EXPECT_EQ(all.describe(0), a + " (sample 0, " + path("list.csv") + ":2)");

  options.split = Split::val;
  const NiftiDataset val = NiftiDataset::from_csv(path("list.csv"), options);
  ASSERT_EQ(val.size(), 1);
  EXPECT_EQ(val.label(0), 1);
  EXPECT_EQ(val.num_classes(), 2);
  options.split = Split::test;
  EXPECT_TRUE(
      contains(error_message([&] { NiftiDataset::from_csv(path("list.csv"), options); }), "no rows in split \"test\""));

  options.split.reset();
  options.num_classes = 10;
  EXPECT_EQ(NiftiDataset::from_csv(path("list.csv"), options).num_classes(), 10);
  options.num_classes = 3;
  EXPECT_TRUE(contains(error_message([&] { NiftiDataset::from_csv(path("list.csv"), options); }),
                       path("list.csv") + ":3: label 3 is not below the number of classes 3"));

  // A file that cannot be read: the message names it, the sample and the manifest line.
  Tensor x = Tensor::empty({1, 2, 2, 2});
  const std::string message = error_message([&] { all.load(1, x, {}); });
  EXPECT_TRUE(contains(message, path("missing.nii") + ": no such file"));
  EXPECT_TRUE(contains(message, "[sample 1, listed at " + path("list.csv") + ":3]"));
  EXPECT_TRUE(contains(error_message([] { parse_enum<Fit>("stretch"); }), "unknown fit mode \"stretch\""));
  EXPECT_EQ(parse_enum<Fit>("resample"), Fit::resample);
}

TEST_F(NiftiDatasetTest, ConcurrentLoadsAgree) {
  const std::string file = write_volume("v.nii.gz", {9, 8, 7}, ramp);
  NiftiDatasetOptions options;
  options.target = {8, 8, 8};
  options.fit = Fit::resample;
  const NiftiDataset ds = one_volume(file, options);
  const Tensor reference = load(ds, 0, Augment{true, 3, 5});
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 5; ++repeat) results[t] = load(ds, 0, Augment{true, 3, 5});
    });
  for (std::thread& t : threads) t.join();
  for (const Tensor& r : results) EXPECT_TRUE(test::tensors_equal(r, reference));
}

}  // namespace
}  // namespace gridnn
