// Training on NIfTI volumes listed in a CSV manifest: the split (the manifest's own, or a
// seeded share), fitting to the model's input, and a bad file named in the error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/train/trainer.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/error_message.h"
#include "test/support/temp_dir.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;

class NiftiTraining : public ::testing::Test {
 protected:
  void SetUp() override { null_ = std::fopen("/dev/null", "w"); }
  void TearDown() override { std::fclose(null_); }

  // Eight volumes of 9 x 11 x 10 voxels (W, H, D), int16 and gzipped, labels alternating;
  // `split` adds a third column.
  std::string write_manifest(bool split) {
    std::ofstream csv(dir_ / "scans.csv");
    csv << (split ? "path,label,split\n" : "path,label\n");
    for (int i = 0; i < 8; ++i) {
      test::NiftiSpec spec;
      spec.dims = {9, 11, 10};
      spec.datatype = 4;  // int16
      std::vector<double> v(9 * 11 * 10);
      for (size_t k = 0; k < v.size(); ++k) v[k] = double((k * (i + 3)) % 50) + (i % 2 ? 40 : 0);
      const std::string name = "scan" + std::to_string(i) + ".nii.gz";
      test::write_nifti1((dir_ / name).string(), spec, v);
      csv << name << "," << i % 2;
      if (split) csv << "," << (i < 6 ? "train" : "val");
      csv << "\n";
    }
    return (dir_ / "scans.csv").string();
  }

  train::TrainOptions options(const std::string& csv) {
    train::TrainOptions o;
    o.data.source = csv;
    o.data.val_fraction = 0.25;
    o.data.fit = data::Fit::resample;
    o.resattnet.width = 2;
    o.input = {12, 12, 12};
    o.batch = 2;
    o.steps = 3;
    o.progress = false;
    return o;
  }

  test::TempDir temp_{"nifti_train"};
  const fs::path dir_ = temp_.path();
  std::FILE* null_ = nullptr;
};

TEST_F(NiftiTraining, SeededShareForValidationAndResampledInput) {
  auto o = options(write_manifest(false));
  const train::Datasets d = train::make_datasets(o);
  EXPECT_EQ(d.train->size(), 6);
  EXPECT_EQ(d.val->size(), 2);
  EXPECT_EQ(d.train->sample_shape(), (Shape{1, 12, 12, 12}));
  train::Trainer t(o, null_);
  const run::Metrics m = t.run();
  EXPECT_EQ(t.state().step, 3);
  EXPECT_EQ(m.samples, 2);
}

TEST_F(NiftiTraining, ManifestSplitIsUsed) {
  auto o = options(write_manifest(true));
  const train::Datasets d = train::make_datasets(o);
  EXPECT_EQ(d.train->size(), 6);
  ASSERT_EQ(d.val->size(), 2);
  EXPECT_NE(d.val->describe(0).find("scan6.nii.gz"), std::string::npos) << d.val->describe(0);
}

TEST_F(NiftiTraining, BadVolumeIsNamed) {
  const std::string csv = write_manifest(true);
  std::ofstream(dir_ / "scan3.nii.gz", std::ios::trunc) << "not a nifti file";
  auto o = options(csv);
  o.steps = 4;  // 3 training batches per epoch: the second epoch reads every file
  o.eval_every = 100;
  const std::string m = test::error_message([&] {
    train::Trainer t(o, null_);
    t.run();
  });
  EXPECT_NE(m.find("scan3.nii.gz"), std::string::npos) << m;
}

}  // namespace
}  // namespace gridnn
