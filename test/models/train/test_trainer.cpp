// The trainer: a run stopped and resumed from its checkpoint ends bitwise where the
// uninterrupted run ends; a NaN loss stops the run with a message and saves nothing; the
// metrics file and the profile; option errors; the AUC against counting pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/profile.h"
#include "core/stop_signal.h"
#include "core/transfers.h"
#include "kernels/elementwise.h"
#include "models/train/trainer.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"
#include "test/support/temp_dir.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;
using test::error_message;
using Json = nlohmann::json;

train::TrainOptions tiny(const fs::path& dir) {
  train::TrainOptions o;
  o.resattnet.width = 2;
  o.input = {16, 16, 16};
  o.batch = 4;
  o.steps = 7;  // 4 batches per epoch: crosses an epoch boundary
  o.data.train_samples = 16;
  o.data.val_samples = 8;
  o.optimizer.momentum = 0.9;
  o.schedule.base_lr = 0.05;
  o.schedule.kind = optim::ScheduleKind::cosine;
  o.checkpoint_dir = dir.string();
  o.progress = false;
  return o;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { null_ = std::fopen("/dev/null", "w"); }
  void TearDown() override { std::fclose(null_); }
  test::TempDir temp_{"trainer"};
  const fs::path dir_ = temp_.path() / "run";  // made by the code under test
  std::FILE* null_ = nullptr;
};

TEST_F(TrainerTest, ResumedRunEqualsUninterruptedRunBitwise) {
  train::Trainer whole(tiny(dir_ / "whole"), null_);
  whole.run();
  ASSERT_EQ(whole.state().step, 7);

  {
    train::Trainer first(tiny(dir_ / "split"), null_);
    first.run(3);  // stops and saves at step 3
    ASSERT_EQ(first.state().step, 3);
  }
  auto o = tiny(dir_ / "split");
  o.resume = true;
  train::Trainer second(o, null_);
  ASSERT_EQ(second.state().step, 3);
  second.run();
  ASSERT_EQ(second.state().step, 7);

  const NamedTensors a = run::model_tensors(whole.model()), b = run::model_tensors(second.model());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::tensors_equal(a[i].second, b[i].second)) << a[i].first;
  const NamedTensors sa = whole.optimizer().state(), sb = second.optimizer().state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(test::tensors_equal(sa[i].second, sb[i].second)) << sa[i].first;
}

// A stop signal (raised in this process, as Slurm's SIGTERM would arrive) ends the run after
// the step under way with one checkpoint; --on-signal exit saves none.
TEST_F(TrainerTest, StopSignalSavesAtTheStepBoundary) {
  install_stop_signals();
  for (const train::OnSignal on_signal : {train::OnSignal::save_exit, train::OnSignal::exit}) {
    const std::string mode = enum_name(on_signal);
    auto o = tiny(dir_ / mode);
    o.on_signal = on_signal;
    train::Trainer t(o, null_);
    clear_stop_signal();
    std::raise(SIGUSR1);
    ASSERT_EQ(stop_signal(), SIGUSR1);
    t.run();
    clear_stop_signal();
    EXPECT_EQ(t.state().step, 1) << mode;
    EXPECT_EQ(t.stopped().signal, SIGUSR1) << mode;
    if (on_signal == train::OnSignal::save_exit) {
      EXPECT_EQ(t.stopped().checkpoint, (dir_ / mode / "step-00000001.safetensors").string());
      EXPECT_EQ(train::latest_checkpoint((dir_ / mode).string())->state.step, 1);
    } else {
      EXPECT_EQ(t.stopped().checkpoint, "");
      EXPECT_FALSE(fs::exists(dir_ / mode));
    }
  }
}

// The loss is read once per --log-every steps (and before validation and checkpoints): a
// step whose loss is not finite is named exactly, and nothing after it is saved.
TEST_F(TrainerTest, NanLossStopsWithAMessageAndKeepsCheckpoints) {
  auto o = tiny(dir_);
  o.log_every = 10;  // more than the run: the NaN is found at the epoch's validation (step 4)
  train::Trainer t(o, null_);
  t.run(2);
  ASSERT_EQ(train::latest_checkpoint(dir_.string())->state.step, 2);
  auto params = t.model().named_parameters();
  ops::fill(params.front().second->value, std::numeric_limits<double>::quiet_NaN());
  const std::string m = error_message([&] { t.run(); });
  EXPECT_NE(m.find("the loss became nan at step 3"), std::string::npos) << m;
  EXPECT_NE(m.find("lower --lr"), std::string::npos) << m;
  EXPECT_EQ(train::latest_checkpoint(dir_.string())->state.step, 2);
}

// docs/design.md §2: a training step reads nothing back from its device. On the CPU the
// counters of core/transfers.h count every to_host / to_vector call (the reads that would be
// downloads on a GPU): none inside a step, one per --log-every steps for the loss.
TEST_F(TrainerTest, AStepReadsNothingBackAndEveryStepIsStillReported) {
  auto o = tiny(dir_);
  o.checkpoint_dir.clear();
  o.steps = 6;
  o.eval_every = 100;  // validation only at the end
  o.log_every = 2;
  fs::create_directories(dir_);
  train::Trainer t(o, null_);
  data::Batch batch;
  batch.x = test::random_tensor({4, 1, 16, 16, 16}, 3);
  batch.y = Tensor::from_vector(std::vector<int64_t>{0, 1, 1, 0}, Shape{4});
  t.train_step(batch);  // warm-up
  reset_transfer_counts();
  const Tensor loss = t.train_step(batch);
  const TransferCounts c = transfer_counts();
  EXPECT_EQ(c.host_reads, 0) << c.str();
  EXPECT_EQ(c.downloads, 0) << c.str();
  EXPECT_TRUE(std::isfinite(loss.to_vector<float>()[0]));

  // A label out of range is an error before anything runs, read on the host.
  batch.y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0}, Shape{4});
  const std::string m = error_message([&] { t.train_step(batch); });
  EXPECT_NE(m.find("label 2 of sample 2 is out of range for 2 classes"), std::string::npos) << m;

  // A run reads the losses in groups of --log-every and still reports every step.
  o.metrics_path = (dir_ / "metrics.jsonl").string();
  train::Trainer logged(o, null_);
  logged.run(5);
  std::ifstream in(o.metrics_path);
  int train_lines = 0;
  for (std::string line; std::getline(in, line);) train_lines += line.find("\"event\":\"train\"") != std::string::npos;
  EXPECT_EQ(train_lines, 5);  // one per step, written when read
}

TEST_F(TrainerTest, MetricsFileHasALinePerStepAndValidation) {
  auto o = tiny(dir_);
  o.checkpoint_dir.clear();
  o.steps = 5;
  o.eval_every = 2;
  o.metrics_path = temp_.file("metrics.jsonl");
  train::Trainer t(o, null_);
  const run::Metrics m = t.run();
  EXPECT_EQ(m.samples, 8);
  EXPECT_TRUE(m.binary);
  std::ifstream in(o.metrics_path);
  int train_lines = 0, validation_lines = 0, done = 0;
  for (std::string line; std::getline(in, line);) {
    train_lines += line.find("\"event\":\"train\"") != std::string::npos;
    validation_lines += line.find("\"event\":\"validation\"") != std::string::npos;
    done += line.find("\"event\":\"done\"") != std::string::npos;
  }
  EXPECT_EQ(train_lines, 5);
  EXPECT_EQ(validation_lines, 3);  // steps 2, 4 and the last
  EXPECT_EQ(done, 1);
}

TEST_F(TrainerTest, ProfileReportsEveryKindOfTheStepsAfterTheFirst) {
  auto o = tiny(dir_);
  o.checkpoint_dir.clear();
  o.steps = 4;
  o.profile = true;
  o.metrics_path = temp_.file("metrics.jsonl");
  const std::string out_path = temp_.file("out.txt");
  std::FILE* out = std::fopen(out_path.c_str(), "w");
  train::Trainer(o, out).run();
  std::fclose(out);
  std::ifstream in(o.metrics_path);
  Json profile;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"event\":\"profile\"") != std::string::npos) profile = Json::parse(line);
  ASSERT_FALSE(profile.is_null());
  EXPECT_EQ(profile["steps"], 3);
  double counted = 0;
  for (const EnumName<ProfileKind>& k : kProfileKindNames) {
    ASSERT_TRUE(profile["seconds"].contains(k.name)) << k.name;
    counted += profile["seconds"][k.name].get<double>();
  }
  // The step's work is mostly in named kinds (no optimizer-free, convolution-free step), and
  // the kinds are a part of the steps' time.
  EXPECT_GT(profile["seconds"]["convolution"].get<double>(), 0.0);
  EXPECT_GT(profile["seconds"]["batchnorm_relu"].get<double>(), 0.0);
  EXPECT_GT(profile["seconds"]["pooling"].get<double>(), 0.0);
  EXPECT_GT(profile["seconds"]["attention"].get<double>(), 0.0);
  EXPECT_GT(profile["seconds"]["optimizer"].get<double>(), 0.0);
  EXPECT_EQ(profile["seconds"]["gradient_sync"].get<double>(), 0.0);  // one process
  EXPECT_LE(counted, profile["step_seconds"].get<double>());
  std::ifstream printed(out_path);
  const std::string text((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("time per step by kind of work, rank 0, the 3 steps after the first"), std::string::npos) << text;
  EXPECT_NE(text.find("| step | "), std::string::npos) << text;
}

TEST_F(TrainerTest, OptionErrorsNameTheFlag) {
  auto o = tiny(dir_);
  o.precision = ops::MathMode::tf32;
  EXPECT_NE(error_message([&] { train::Trainer t(o, null_); }).find("--precision tf32 needs --device cuda"),
            std::string::npos);
  o = tiny(dir_);
  o.checkpoint_dir.clear();
  o.resume = true;
  EXPECT_NE(error_message([&] { train::Trainer t(o, null_); }).find("--resume needs --checkpoint-dir"),
            std::string::npos);
  o = tiny(dir_);
  o.batch = 17;
  EXPECT_NE(error_message([&] { train::Trainer t(o, null_); }).find("use a smaller --batch"), std::string::npos);
}

TEST(Metrics, AucCountsOrderedPairs) {
  const std::vector<double> score{0.1, 0.4, 0.35, 0.8, 0.4, 0.9, 0.2};
  const std::vector<int64_t> label{0, 0, 1, 1, 1, 0, 0};
  double pairs = 0, wins = 0;
  for (size_t i = 0; i < score.size(); ++i)
    for (size_t j = 0; j < score.size(); ++j)
      if (label[i] == 1 && label[j] == 0) {
        pairs += 1;
        wins += score[i] > score[j] ? 1.0 : score[i] == score[j] ? 0.5 : 0.0;
      }
  EXPECT_DOUBLE_EQ(run::roc_auc(score, label), wins / pairs);
  EXPECT_EQ(run::roc_auc({0.3, 0.4}, {1, 1}), 0.5);
  // A diverged network's NaN score: undefined, and the rank loop must still end.
  EXPECT_TRUE(std::isnan(run::roc_auc({0.3, std::nan(""), 0.4}, {1, 0, 0})));

  run::MetricsAccumulator acc;
  acc.add(Tensor::from_vector(std::vector<float>{2, 0, 0, 1, 3, -1, 0, 0}, {4, 2}),
          Tensor::from_vector(std::vector<int64_t>{0, 1, 1, 0}, {4}), 2.0);
  const run::Metrics m = acc.result();
  EXPECT_DOUBLE_EQ(m.loss, 0.5);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.75);    // predictions 0, 1, 0, 0 (a tie goes to class 0)
  EXPECT_DOUBLE_EQ(m.sensitivity, 0.5);  // labels 1: row 1 right, row 2 wrong
  EXPECT_DOUBLE_EQ(m.specificity, 1.0);  // labels 0: rows 0 and 3 right
}

}  // namespace
}  // namespace gridnn
