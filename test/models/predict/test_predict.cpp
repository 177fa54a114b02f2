// gridnn-predict's work (models/predict/predict.h): the same metrics as training's validation
// on the same checkpoint, unreadable scans listed and the rest predicted, a checkpoint that
// does not fit the flags named tensor by tensor, Grad-CAM files in each scan's grid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/allocator.h"
#include "core/error.h"
#include "models/data/nifti_volume.h"
#include "models/predict/predict.h"
#include "models/run/memory_plan.h"
#include "models/train/trainer.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/error_message.h"
#include "test/support/temp_dir.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

class Predict : public ::testing::Test {
 protected:
  void SetUp() override { null_ = std::fopen("/dev/null", "w"); }
  void TearDown() override { std::fclose(null_); }

  // Twelve volumes of 11 x 13 x 12 voxels (W, H, D), int16, gzipped; class 1 has a bright
  // block. Rows 0-7 train, 8-11 val; `extra` rows are appended as they are.
  std::string write_manifest(const std::string& extra = "") {
    std::ofstream csv(dir_ / "scans.csv");
    csv << "path,label,split\n";
    for (int i = 0; i < 12; ++i) {
      test::NiftiSpec spec;
      spec.dims = {11, 13, 12};
      spec.datatype = 4;
      std::vector<double> v(11 * 13 * 12);
      for (size_t k = 0; k < v.size(); ++k) {
        const size_t w = k % 11, h = k / 11 % 13, d = k / 143;
        v[k] = double((k * (i + 3)) % 37) + ((i % 2) && w > 3 && w < 8 && h > 4 && h < 9 && d > 3 && d < 8 ? 80 : 0);
      }
      const std::string name = "scan" + std::to_string(i) + ".nii.gz";
      test::write_nifti1((dir_ / name).string(), spec, v);
      csv << name << "," << i % 2 << "," << (i < 8 ? "train" : "val") << "\n";
    }
    csv << extra;
    return (dir_ / "scans.csv").string();
  }

  train::TrainOptions options(const std::string& csv) {
    train::TrainOptions o;
    o.data.source = csv;
    o.data.fit = data::Fit::resample;
    o.data.augment = false;
    o.resattnet.width = 2;
    o.input = {12, 12, 12};
    o.batch = 4;
    o.steps = 4;
    o.progress = false;
    o.checkpoint_dir = (dir_ / "ckpt").string();
    return o;
  }

  // Trains briefly and returns the last validation; `checkpoint_` is the checkpoint saved.
  run::Metrics train(const train::TrainOptions& o) {
    train::Trainer t(o, null_);
    const run::Metrics m = t.run();
    checkpoint_ = train::checkpoint_path(o.checkpoint_dir, o.steps);
    return m;
  }

  predict::PredictOptions predict_options(const train::TrainOptions& o) {
    predict::PredictOptions p;
    p.run = o;
    p.weights = checkpoint_;
    p.data = o.data.source;
    p.out = (dir_ / "out" / "pred.csv").string();
    fs::create_directories(dir_ / "out");
    return p;
  }

  test::TempDir temp_{"predict"};
  const fs::path dir_ = temp_.path();
  std::FILE* null_ = nullptr;
  std::string checkpoint_;
};

TEST_F(Predict, MetricsEqualTrainingValidationOnTheSameCheckpoint) {
  const train::TrainOptions o = options(write_manifest());
  const run::Metrics val = train(o);
  predict::PredictOptions p = predict_options(o);
  p.split = predict::SplitFilter::val;
  p.run.batch = 3;  // other batches than training's: evaluation mode keeps samples independent
  auto grid = parallel::ProcessGrid::single();
  const predict::PredictResult r = predict::predict(p, *grid, null_);
  ASSERT_TRUE(r.labelled);
  EXPECT_EQ(r.scans, 4);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.metrics.samples, val.samples);
  EXPECT_NEAR(r.metrics.loss, val.loss, 1e-6 * std::max(1.0, val.loss));
  EXPECT_EQ(r.metrics.accuracy, val.accuracy);
  EXPECT_EQ(r.metrics.sensitivity, val.sensitivity);
  EXPECT_EQ(r.metrics.specificity, val.specificity);
  EXPECT_EQ(r.metrics.auc, val.auc);
  int64_t total = 0, correct = 0;
  for (size_t i = 0; i < r.confusion.size(); ++i)
    for (size_t j = 0; j < r.confusion[i].size(); ++j)
      total += r.confusion[i][j], correct += i == j ? r.confusion[i][j] : 0;
  EXPECT_EQ(total, 4);
  EXPECT_DOUBLE_EQ(double(correct) / 4.0, r.metrics.accuracy);

  // The CSV: a header and a row per scan whose probabilities sum to 1; metrics and ROC beside it.
  const auto lines = lines_of(p.out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "path,prob_0,prob_1,predicted,label,error");
  for (size_t i = 1; i < lines.size(); ++i) {
    std::stringstream row(lines[i]);
    std::string path, p0, p1, predicted, label;
    std::getline(row, path, ','), std::getline(row, p0, ','), std::getline(row, p1, ',');
    std::getline(row, predicted, ','), std::getline(row, label, ',');
    EXPECT_NE(path.find("scan" + std::to_string(7 + i)), std::string::npos) << lines[i];
    EXPECT_NEAR(std::stod(p0) + std::stod(p1), 1.0, 1e-5) << lines[i];
    EXPECT_EQ(predicted, std::stod(p1) > std::stod(p0) ? "1" : "0") << lines[i];
    EXPECT_EQ(label, std::to_string((7 + i) % 2)) << lines[i];
  }
  for (const char* f : {"pred_metrics.json", "pred_roc.csv", "pred_roc.png"})
    EXPECT_TRUE(fs::exists(dir_ / "out" / f)) << f;
}

TEST_F(Predict, UnreadableScansAreListedAndTheOthersPredicted) {
  // A missing file, one that is not NIfTI, and a 4-D one (two channels where one is expected).
  std::ofstream(dir_ / "garbage.nii") << "not a NIfTI file at all, just some text that is long enough";
  test::NiftiSpec four_d;
  four_d.dims = {11, 13, 12, 2};
  test::write_nifti1((dir_ / "two_channels.nii").string(), four_d, std::vector<double>(11 * 13 * 12 * 2, 1.0));
  const std::string csv = write_manifest("missing.nii.gz,0,test\ngarbage.nii,1,test\ntwo_channels.nii,0,test\n");
  const train::TrainOptions o = options(csv);
  train(o);
  predict::PredictOptions p = predict_options(o);  // every split
  auto grid = parallel::ProcessGrid::single();
  const predict::PredictResult r = predict::predict(p, *grid, null_);
  EXPECT_EQ(r.scans, 15);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.metrics.samples, 12);  // the readable ones
  EXPECT_EQ(r.logits.size(0), 12);
  const auto lines = lines_of(p.out);
  ASSERT_EQ(lines.size(), 16u);
  for (const char* name : {"missing.nii.gz", "garbage.nii", "two_channels.nii"}) {
    bool found = false;
    for (const auto& line : lines)
      if (line.rfind((dir_ / name).string(), 0) == 0) {
        found = true;
        EXPECT_NE(line.find(",,,"), std::string::npos) << "no probabilities for " << line;
        // The error names the file.
        EXPECT_NE(line.substr((dir_ / name).string().size()).find(name), std::string::npos) << line;
      }
    EXPECT_TRUE(found) << name;
  }
  const std::string& four_d_row = lines.back();
  EXPECT_NE(four_d_row.find("is 4-D (2 volumes)"), std::string::npos) << four_d_row;
}

TEST_F(Predict, ACheckpointThatDoesNotFitTheFlagsListsTheTensors) {
  const train::TrainOptions o = options(write_manifest());
  train(o);
  predict::PredictOptions p = predict_options(o);
  p.run.resattnet.width = 4;
  auto grid = parallel::ProcessGrid::single();
  // Width 4 cannot load a width-2 checkpoint.
  const std::string what = test::error_message([&] { predict::predict(p, *grid, null_); });
  EXPECT_NE(what.find("does not match the model"), std::string::npos) << what;
  EXPECT_NE(what.find("conv1.weight"), std::string::npos) << what;
}

TEST_F(Predict, ExplainWritesHeatmapsInEachScansGridAndNamesBadLayers) {
  const train::TrainOptions o = options(write_manifest());
  train(o);
  predict::PredictOptions p = predict_options(o);
  p.split = predict::SplitFilter::val;
  p.explain_dir = (dir_ / "heat").string();
  p.explain_layer = "no-such-layer";
  auto grid = parallel::ProcessGrid::single();
  // An unknown layer must be refused.
  const std::string what = test::error_message([&] { predict::predict(p, *grid, null_); });
  EXPECT_NE(what.find("choose one of: stem, layer1.0"), std::string::npos) << what;
  p.explain_layer = "layer3.1";
  const predict::PredictResult r = predict::predict(p, *grid, null_);
  // Explaining gives the logits of a plain prediction.
  predict::PredictOptions plain = p;
  plain.explain_dir.clear();
  const predict::PredictResult q = predict::predict(plain, *grid, null_);
  EXPECT_EQ(r.logits.to_vector<float>(), q.logits.to_vector<float>());
  for (int i = 8; i < 12; ++i) {
    const fs::path heat = dir_ / "heat" / ("scan" + std::to_string(i) + "_gradcam.nii.gz");
    ASSERT_TRUE(fs::exists(heat)) << heat;
    EXPECT_TRUE(fs::exists(dir_ / "heat" / ("scan" + std::to_string(i) + "_gradcam.png")));
    const Tensor map = data::read_nifti_volume(heat.string());
    EXPECT_EQ(map.shape(), (Shape{12, 13, 11}));  // the scan's stored grid, not the network's 12^3
    for (float v : map.to_vector<float>()) ASSERT_TRUE(v >= 0.0f && v <= 1.0f) << v;
  }
}

// --explain-mask outlines each scan's own region ("{name}" in the path) on its montage; a
// mask in another voxel grid is refused naming both grids, and so is --explain-tta 0.
TEST_F(Predict, ExplainMasksAreOutlinedAndAMaskInAnotherGridIsRefused) {
  const train::TrainOptions o = options(write_manifest());
  train(o);
  predict::PredictOptions p = predict_options(o);
  p.split = predict::SplitFilter::val;
  p.explain_layer = "layer2";
  fs::create_directories(dir_ / "masks");
  for (int i = 8; i < 12; ++i) {
    test::NiftiSpec spec;
    spec.dims = {11, 13, 12};
    std::vector<double> v(11 * 13 * 12, 0.0);
    for (size_t k = 0; k < v.size(); ++k) v[k] = (k % 11 > 2 && k % 11 < 8 && k / 11 % 13 > 3 && k / 143 > 2) ? 1 : 0;
    test::write_nifti1((dir_ / "masks" / ("scan" + std::to_string(i) + "_region.nii")).string(), spec, v);
  }
  auto grid = parallel::ProcessGrid::single();
  p.explain_dir = (dir_ / "plain").string();
  predict::predict(p, *grid, null_);
  p.explain_dir = (dir_ / "outlined").string();
  p.explain_mask = (dir_ / "masks" / "{name}_region.nii").string();
  predict::predict(p, *grid, null_);
  for (int i = 8; i < 12; ++i) {
    const std::string png = "scan" + std::to_string(i) + "_gradcam.png";
    EXPECT_NE(read_file(dir_ / "plain" / png), read_file(dir_ / "outlined" / png)) << png << " has no outline";
    EXPECT_EQ(read_file(dir_ / "plain" / ("scan" + std::to_string(i) + "_gradcam.nii.gz")),
              read_file(dir_ / "outlined" / ("scan" + std::to_string(i) + "_gradcam.nii.gz")));
  }

  test::NiftiSpec other;
  other.dims = {11, 13, 13};
  test::write_nifti1((dir_ / "masks" / "other.nii").string(), other, std::vector<double>(11 * 13 * 13, 1.0));
  p.explain_mask = (dir_ / "masks" / "other.nii").string();
  // A mask in another grid must be refused.
  const std::string m = test::error_message([&] { predict::predict(p, *grid, null_); });
  EXPECT_NE(m.find("is not in the voxel grid of the scan"), std::string::npos) << m;
  EXPECT_NE(m.find("[13, 13, 11]"), std::string::npos) << m;
  EXPECT_NE(m.find("[12, 13, 11]"), std::string::npos) << m;
  p.explain_mask.clear();
  p.explain_tta = 0;
  // --explain-tta 0 must be refused.
  const std::string what = test::error_message([&] { predict::predict(p, *grid, null_); });
  EXPECT_NE(what.find("--explain-tta 0: give at least 1"), std::string::npos) << what;
}

// --memory-limit below the predicted peak stops before any scan is read or file written,
// naming the peak and what fits (a smaller batch); above it, the prediction runs under the
// allocator's cap. With --explain the job keeps activations for a backward: a larger peak.
TEST_F(Predict, AMemoryLimitBelowThePredictedPeakStopsBeforeAnythingIsWritten) {
  const train::TrainOptions o = options(write_manifest());
  train(o);
  predict::PredictOptions p = predict_options(o);
  p.out = (dir_ / "limited" / "pred.csv").string();
  p.explain_dir = (dir_ / "limited-heat").string();
  auto peak = [&p](int64_t batch, run::MemoryJob job) {
    run::RunOptions t = p.run;
    t.batch = batch;
    return run::largest_peak(run::predict_grid_memory(t, {1, 1, 1}, job));
  };
  const int64_t plain = peak(4, run::MemoryJob::prediction), explaining = peak(4, run::MemoryJob::explanation);
  EXPECT_GT(explaining, plain);
  ASSERT_LT(peak(1, run::MemoryJob::explanation), explaining);
  auto grid = parallel::ProcessGrid::single();
  p.run.memory_limit = explaining - 1;
  // A limit below the predicted peak must stop the job.
  const std::string m = test::error_message([&] { predict::predict(p, *grid, null_); });
  for (const char* needed : {"--memory-limit", "would need", "Nothing was run or written", "what fits: --batch"})
    EXPECT_NE(m.find(needed), std::string::npos) << needed << " in: " << m;
  EXPECT_FALSE(fs::exists(p.out));
  EXPECT_FALSE(fs::exists(p.explain_dir));
  // Above the plain prediction's peak (with room for what reading a scan holds for a moment),
  // it runs capped.
  p.explain_dir.clear();
  p.run.memory_limit = 2 * plain;
  EXPECT_NO_THROW(predict::predict(p, *grid, null_));
  host_allocator().set_limit(0);
  EXPECT_TRUE(fs::exists(p.out));
}

TEST_F(Predict, OneClassGivesNoRocAndScansOfOneNameGetTheirOwnHeatmaps) {
  const train::TrainOptions o = options(write_manifest());
  train(o);
  // The same file name in two folders, both of class 1.
  for (const char* sub : {"a", "b"}) {
    fs::create_directories(dir_ / sub);
    fs::copy_file(dir_ / "scan1.nii.gz", dir_ / sub / "x.nii.gz");
  }
  std::ofstream(dir_ / "same.csv") << "path,label\na/x.nii.gz,1\nb/x.nii.gz,1\n";
  predict::PredictOptions p = predict_options(o);
  p.data = (dir_ / "same.csv").string();
  p.explain_dir = (dir_ / "heat").string();
  auto grid = parallel::ProcessGrid::single();
  const predict::PredictResult r = predict::predict(p, *grid, null_);
  EXPECT_EQ(r.metrics.samples, 2);
  EXPECT_TRUE(fs::exists(dir_ / "out" / "pred_metrics.json"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "pred_roc.csv"));  // one class: no curve
  for (const char* name : {"x-1_gradcam.nii.gz", "x-2_gradcam.nii.gz", "x-1_gradcam.png", "x-2_gradcam.png"})
    EXPECT_TRUE(fs::exists(dir_ / "heat" / name)) << name;
  EXPECT_FALSE(fs::exists(dir_ / "heat" / "x_gradcam.nii.gz"));

  // A split without rows (the manifest has no test rows) says which splits there are.
  const std::string what =
      test::error_message([&] { predict::list_scans((dir_ / "scans.csv").string(), predict::SplitFilter::test); });
  EXPECT_NE(what.find("train 8, val 4"), std::string::npos) << what;
}

TEST_F(Predict, FoldersAndSingleFilesAreUnlabelled) {
  write_manifest();
  const auto folder = predict::list_scans(dir_.string(), predict::SplitFilter::all);
  ASSERT_EQ(folder.size(), 12u);
  EXPECT_NE(folder[0].path.find("scan0.nii.gz"), std::string::npos);
  EXPECT_NE(folder[2].path.find("scan10.nii.gz"), std::string::npos);  // sorted by name
  EXPECT_EQ(folder[0].label, -1);
  const auto one = predict::list_scans((dir_ / "scan3.nii.gz").string(), predict::SplitFilter::all);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].label, -1);
  EXPECT_EQ(predict::list_scans((dir_ / "scans.csv").string(), predict::SplitFilter::val).size(), 4u);
  EXPECT_EQ(predict::list_scans((dir_ / "scans.csv").string(), predict::SplitFilter::val)[0].label, 0);
  EXPECT_THROW(predict::list_scans((dir_ / "nothing").string(), predict::SplitFilter::all), Error);
  EXPECT_EQ(predict::scan_stem("/a/b/sub-01.nii.gz"), "sub-01");
  EXPECT_EQ(predict::scan_stem("x.hdr"), "x");
}

}  // namespace
}  // namespace gridnn
