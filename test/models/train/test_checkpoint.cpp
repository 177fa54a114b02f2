// Checkpoints: round trip of weights, buffers, optimizer state and run state; pruning;
// resuming skips an unreadable newest file; a crash in the middle of a save (a real
// process exit while writing) leaves the previous checkpoint loadable; strict weight
// loading lists every problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/nets/mlp.h"
#include "models/train/checkpoint.h"
#include "test/support/error_message.h"
#include "test/support/file_faults.h"
#include "test/support/random_tensor.h"
#include "test/support/temp_dir.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;
using test::error_message;

class CheckpointTest : public ::testing::Test {
 protected:
  // An MLP after one SGD-with-momentum step, so the optimizer has state.
  struct Run {
    nn::Mlp model{{{6, 5, 3}}};
    std::unique_ptr<optim::Optimizer> opt;
    explicit Run(uint64_t seed) {
      model.initialize(seed);
      optim::OptimizerOptions o;
      o.momentum = 0.9;
      opt = optim::make_optimizer(o, model.named_parameters());
      model.forward(test::random_tensor({4, 6}, seed));
      model.backward(test::random_tensor({4, 3}, seed + 1));
      opt->step(0.1);
    }
  };

  std::string dir() const { return dir_.string(); }
  test::TempDir temp_{"ckpt"};
  const fs::path dir_ = temp_.path() / "checkpoints";  // made by the code under test
};

TEST_F(CheckpointTest, RoundTripsModelOptimizerAndRunState) {
  Run a(1);
  train::RunState s;
  s.step = 17;
  s.epoch = 2;
  s.batch = 3;
  s.seed = 99;
  s.grid = "1x1";
  s.config_json = R"({"model":"mlp"})";
  const std::string path = train::save_checkpoint(dir(), a.model, *a.opt, s);
  EXPECT_EQ(fs::path(path).filename(), "step-00000017.safetensors");

  train::Checkpoint c = train::read_checkpoint(path);
  EXPECT_EQ(c.state.step, 17);
  EXPECT_EQ(c.state.epoch, 2);
  EXPECT_EQ(c.state.batch, 3);
  EXPECT_EQ(c.state.seed, 99u);
  EXPECT_EQ(c.state.config_json, s.config_json);
  EXPECT_EQ(c.optimizer_steps, 1);
  EXPECT_EQ(c.optimizer.size(), 4u);  // a momentum buffer per parameter
  EXPECT_TRUE(c.optimizer.count("fc1.weight.momentum_buffer"));

  Run b(2);  // other weights and state
  run::load_model_tensors(b.model, c.model, path);
  b.opt->load_state(c.optimizer, c.optimizer_steps);
  for (auto& [name, t] : run::model_tensors(b.model)) EXPECT_TRUE(test::tensors_equal(t, c.model.at(name))) << name;
  // Same state, same next step.
  for (Run* r : {&a, &b}) {
    r->model.zero_grad();
    r->model.forward(test::random_tensor({4, 6}, 50));
    r->model.backward(test::random_tensor({4, 3}, 51));
    r->opt->step(0.1);
  }
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(
        test::tensors_equal(a.model.named_parameters()[i].second->value, b.model.named_parameters()[i].second->value));
}

TEST_F(CheckpointTest, KeepsTheNewestAndResumesFromTheNewestReadable) {
  Run a(1);
  train::RunState s;
  for (int64_t step : {10, 20, 30}) {
    s.step = step;
    train::save_checkpoint(dir(), a.model, *a.opt, s, 2);
  }
  EXPECT_FALSE(fs::exists(dir_ / "step-00000010.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "step-00000020.safetensors"));
  EXPECT_EQ(train::latest_checkpoint(dir())->state.step, 30);
  // A damaged newest file is skipped.
  fs::resize_file(dir_ / "step-00000030.safetensors", 100);
  EXPECT_EQ(train::latest_checkpoint(dir())->state.step, 20);
  EXPECT_FALSE(train::latest_checkpoint((dir_ / "none").string()).has_value());
}

TEST_F(CheckpointTest, AnotherFormatVersionIsRefusedNotSkipped) {
  Run a(1);
  train::RunState s;
  for (int64_t step : {10, 20}) {
    s.step = step;
    train::save_checkpoint(dir(), a.model, *a.opt, s, 2);
  }
  // The newest as another version would write it: same bytes, another format string.
  const fs::path newest = dir_ / "step-00000020.safetensors";
  std::string bytes;
  {
    std::ifstream in(newest, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("gridnn-checkpoint-1");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 18] = '2';
  std::ofstream(newest, std::ios::binary) << bytes;
  const std::string m = error_message([&] { train::latest_checkpoint(dir()); });
  EXPECT_NE(m.find("checkpoint format 'gridnn-checkpoint-2' is another version than the 'gridnn-checkpoint-1'"),
            std::string::npos)
      << m;
  // Its weights still load for --init-from (without the optimizer state).
  const auto weights = run::read_weights(newest.string());
  EXPECT_EQ(weights.size(), run::model_tensors(a.model).size());
}

TEST_F(CheckpointTest, CrashWhileSavingLeavesThePreviousCheckpoint) {
  Run a(1);
  train::RunState s;
  s.step = 5;
  const std::string good = train::save_checkpoint(dir(), a.model, *a.opt, s);
  s.step = 6;
  // The child process writes 200 bytes of the next checkpoint and dies.
  EXPECT_EXIT(
      {
        const FileWriteOverride crash(test::crash_after(200, 86));
        train::save_checkpoint(dir(), a.model, *a.opt, s);
      },
      ::testing::ExitedWithCode(86), "");
  EXPECT_FALSE(fs::exists(dir_ / "step-00000006.safetensors"));
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    temporaries += e.path().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(temporaries, 1);  // the crash's leftover, never mistaken for a checkpoint
  auto c = train::latest_checkpoint(dir());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->path, good);
  EXPECT_EQ(c->state.step, 5);
}

TEST_F(CheckpointTest, StrictLoadingListsEveryProblem) {
  nn::Mlp model({{6, 5, 3}});
  std::map<std::string, Tensor> t;
  t["fc1.weight"] = Tensor::zeros({5, 6});
  t["fc1.bias"] = Tensor::zeros({4});  // mis-shaped
  t["fc2.weight"] = Tensor::zeros({3, 5});
  t["head.weight"] = Tensor::zeros({2});  // unexpected; fc2.bias missing
  const std::string m = error_message([&] { run::load_model_tensors(model, t, "w.safetensors"); });
  EXPECT_NE(m.find("w.safetensors does not match the model"), std::string::npos) << m;
  EXPECT_NE(m.find("missing (1):\n    fc2.bias [3]"), std::string::npos) << m;
  EXPECT_NE(m.find("mis-shaped (1):\n    fc1.bias: file has f32[4]"), std::string::npos) << m;
  EXPECT_NE(m.find("unexpected (1):\n    head.weight [2]"), std::string::npos) << m;
  EXPECT_NE(error_message([&] { train::read_checkpoint("/nonexistent/step-1.safetensors"); }).find("cannot open"),
            std::string::npos);
}

TEST_F(CheckpointTest, PlainWeightsAreNotACheckpoint) {
  fs::create_directories(dir_);
  const std::string p = (dir_ / "w.safetensors").string();
  save_safetensors(p, {{"fc1.weight", Tensor::zeros({2})}});
  EXPECT_NE(error_message([&] { train::read_checkpoint(p); }).find("not a gridnn checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace gridnn
