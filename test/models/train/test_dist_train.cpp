// Grid invariance (docs/design.md §4), under mpiexec -n 1, 2, 4: on every grid Pr x Pc with
// Pr * Pc = the job's size, a training step of a small ResAttNet3D (--dump-step: logits,
// loss, every gradient, every updated parameter and buffer) equals the single-process step;
// three trainer steps end at the single-process weights; two runs on one grid are bitwise
// equal, as are the steps with and without --recompute blocks and --halo overlap; a run saved
// on a grid resumes on one process (and the other way) and ends where the
// uninterrupted run ends. fp32 on the CPU: relative error <= 1e-4 per tensor, measured as
// test/support/grid_invariance.h says.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/data/synthetic.h"
#include "models/train/trainer.h"
#include "parallel/process_grid.h"
#include "test/support/grid_invariance.h"
#include "test/support/mpi_main.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;

// Every Pr x Pc with Pr * Pc = n.
std::vector<parallel::GridShape> grids(int n) {
  std::vector<parallel::GridShape> out;
  for (int rows = 1; rows <= n; ++rows)
    if (n % rows == 0) out.push_back({1, rows, n / rows});
  return out;
}

using test::as_map;
using test::expect_close;

// fp32 drift between grids grows about twofold a step, and its size depends on the CPU's
// kernels (oneDNN picks its ISA at run time) and the data: three steps get four times the
// one-step bound (measured up to 1.0e-4 on a small batch-norm bias; a distribution error
// gives errors of order 1).
constexpr double kThreeSteps = 4 * test::kGridRelativeError;
train::TrainOptions tiny() { return test::tiny_resattnet(); }
train::TrainOptions tiny_mlp() { return test::tiny_mlp(); }

// A folder every rank shares (rank 0 makes and removes it).
test::TempDir shared_dir(const std::string& what) { return test::shared_temp_dir("dist_train_" + what); }

// One batch of 8 synthetic 24x24x20 volumes of 3 classes, as --dump-step reads it (x, y).
void save_tiny_batch(const fs::path& file) {
  data::SyntheticDataset d({8, 0, 3, 1, Shape{24, 24, 20}, 7, 0.15f});
  data::BatchLoader loader(d, {8, false, true, 7, false, 0, -1, {}, false});
  const data::Batch b = loader.next();
  save_safetensors(file.string(), {{"x", b.x}, {"y", b.y}});
}

class DistTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { world_ = parallel::ProcessGrid::create({1, test::world_size(), 1}); }
  static void TearDownTestSuite() { world_.reset(); }
  static inline std::unique_ptr<parallel::ProcessGrid> world_;
};

void dump_step_on_every_grid(const train::TrainOptions& options, const std::string& model) {
  const test::TempDir shared = shared_dir("dump_" + model);
  const fs::path& dir = shared.path();
  auto world = parallel::ProcessGrid::create({1, test::world_size(), 1});
  if (test::world_rank() == 0) {
    // A batch from the synthetic set and the 1x1 step, on rank 0 alone.
    const auto& o = options;
    save_tiny_batch(dir / "batch.safetensors");
    train::dump_step(o, (dir / "batch.safetensors").string(), (dir / "1x1.safetensors").string());
  }
  world->world().barrier();
  for (const parallel::GridShape& shape : grids(test::world_size())) {
    auto grid = parallel::ProcessGrid::create(shape);
    const std::string out = (dir / (shape.str() + ".safetensors")).string();
    train::dump_step(options, (dir / "batch.safetensors").string(), out, grid.get());
    if (test::world_rank() == 0)
      expect_close(load_safetensors(out).tensors, load_safetensors((dir / "1x1.safetensors").string()).tensors,
                   model + " on grid " + shape.str());
  }
  world->world().barrier();  // before rank 0 removes the folder
}

TEST_F(DistTrain, DumpStepOnEveryGridEqualsOneProcess) { dump_step_on_every_grid(tiny(), "resattnet3d"); }

TEST_F(DistTrain, MlpDumpStepOnEveryGridEqualsOneProcess) { dump_step_on_every_grid(tiny_mlp(), "mlp"); }

// --batch-split-from: from a block's input on, each row splits the batch instead of the
// depth. The step equals the single-process step on every grid, switching at the stem, in
// the middle (from depth slabs, or at 4 rows from the replicated layers), at an attention
// block and at the head; and with two pipeline stages of two micro-batches, the switch
// before or after the stages' cut.
TEST_F(DistTrain, BatchSplitFromABlockEqualsOneProcess) {
  const test::TempDir shared = shared_dir("batch_split");
  const fs::path& dir = shared.path();
  if (test::world_rank() == 0) {
    save_tiny_batch(dir / "batch.safetensors");
    // With micro-batches batch norm normalizes each one: the stages' reference has two.
    for (const int m : {1, 2}) {
      train::TrainOptions o = tiny();
      o.micro_batches = m;
      train::dump_step(o, (dir / "batch.safetensors").string(), (dir / ("1x1m" + std::to_string(m))).string());
    }
  }
  world_->world().barrier();
  std::vector<parallel::GridShape> shapes = grids(test::world_size());
  if (test::world_size() % 2 == 0) shapes.push_back({2, 1, test::world_size() / 2});
  for (const parallel::GridShape& shape : shapes) {
    auto grid = parallel::ProcessGrid::create(shape);
    const fs::path reference = dir / ("1x1m" + std::to_string(shape.stages));
    for (const char* block : {"stem", "layer2.0", "layer3.1", "att4", "head"}) {
      train::TrainOptions o = tiny();
      o.batch_split_from = block;
      o.grid = shape;
      o.micro_batches = shape.stages;
      const std::string out = (dir / (shape.str() + block + ".safetensors")).string();
      train::dump_step(o, (dir / "batch.safetensors").string(), out, grid.get());
      if (test::world_rank() == 0)
        expect_close(load_safetensors(out).tensors, load_safetensors(reference.string()).tensors,
                     "batch split from " + std::string(block) + " on " + shape.str());
    }
  }
  world_->world().barrier();  // before rank 0 removes the folder
}

// Validation past the switch: a last batch whose shard does not split evenly over the row
// (5 samples: shards of 5 on 2 x 1, 3 + 2 on 1 x 2, 2 + 1 ... on 4 rows) is padded and its
// padding dropped: the metrics are the single process's.
TEST_F(DistTrain, BatchSplitFromValidatesAnUnevenLastBatch) {
  std::FILE* null = std::fopen("/dev/null", "w");
  train::TrainOptions o = tiny();
  o.steps = 1;
  o.data.val_samples = 5;
  o.batch_split_from = "layer3.0";
  run::Metrics single;
  if (test::world_rank() == 0) single = train::Trainer(o, null).run();
  for (const parallel::GridShape& shape : grids(test::world_size())) {
    auto grid = parallel::ProcessGrid::create(shape);
    const run::Metrics m = train::Trainer(o, null, grid.get()).run();
    if (test::world_rank() != 0) continue;
    EXPECT_EQ(m.samples, 5) << shape.str();
    EXPECT_NEAR(m.loss, single.loss, 1e-4 * std::abs(single.loss)) << shape.str();
    EXPECT_EQ(m.accuracy, single.accuracy) << shape.str();
  }
  std::fclose(null);
}

// The switch's errors name what to change: an unknown block, a batch shard the row cannot
// split evenly.
TEST_F(DistTrain, BatchSplitFromRejectsWhatItCannotRun) {
  auto grid = parallel::ProcessGrid::create({1, test::world_size(), 1});
  train::TrainOptions o = tiny();
  o.batch_split_from = "layer9.0";
  try {
    run::PipelinedModel net(o, *grid);
    ADD_FAILURE() << "an unknown block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its blocks are stem, layer1.0"), std::string::npos) << e.what();
  }
  if (test::world_size() < 2) return;
  o.batch_split_from = "layer2.0";
  o.batch = 8 * test::world_size() + 1;
  try {
    run::PipelinedModel net(o, *grid);
    ADD_FAILURE() << "a batch the row cannot split was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of " + std::to_string(test::world_size())), std::string::npos)
        << e.what();
  }
}

// The --dump-step step (logits, loss, gradients, updated weights, batch-norm running
// statistics) with set(o, 0) and with set(o, 1), expected bitwise equal, on every grid of the
// job and with two pipeline stages of two micro-batches.
void expect_bitwise_same_step(parallel::ProcessGrid& world, const std::string& what,
                              const std::function<void(train::TrainOptions&, int)>& set) {
  const test::TempDir shared = shared_dir(what);
  const fs::path& dir = shared.path();
  if (test::world_rank() == 0) save_tiny_batch(dir / "batch.safetensors");
  world.world().barrier();
  std::vector<parallel::GridShape> shapes = grids(test::world_size());
  if (test::world_size() % 2 == 0) shapes.push_back({2, 1, test::world_size() / 2});
  for (const parallel::GridShape& shape : shapes) {
    auto grid = parallel::ProcessGrid::create(shape);
    std::map<std::string, Tensor> steps[2];
    for (int variant = 0; variant < 2; ++variant) {
      train::TrainOptions o = tiny();
      set(o, variant);
      o.grid = shape;
      o.micro_batches = shape.stages;
      const std::string out = (dir / (shape.str() + std::to_string(variant) + ".safetensors")).string();
      train::dump_step(o, (dir / "batch.safetensors").string(), out, grid.get());
      if (test::world_rank() == 0) steps[variant] = load_safetensors(out).tensors;
    }
    if (test::world_rank() != 0) continue;
    ASSERT_EQ(steps[0].size(), steps[1].size());
    for (const auto& [name, t] : steps[0])
      EXPECT_TRUE(test::tensors_equal(t, steps[1].at(name))) << shape.str() << ": " << name;
    EXPECT_GT(steps[0].count("bn1.running_mean"), 0u);
  }
  world.world().barrier();  // before rank 0 removes the folder
}

// --recompute blocks runs each residual and attention block's forward again before its
// backward: the step is bitwise the step without it.
TEST_F(DistTrain, RecomputedBlocksGiveBitwiseTheSameStep) {
  expect_bitwise_same_step(*world_, "recompute", [](train::TrainOptions& o, int variant) {
    o.recompute = variant == 0 ? run::Recompute::none : run::Recompute::blocks;
  });
}

// --halo overlap convolves a slab's inner planes while the halo travels and returns the halo
// gradients during the weight gradient: the step is bitwise the blocking one.
TEST_F(DistTrain, OverlappedHaloGivesBitwiseTheSameStep) {
  expect_bitwise_same_step(*world_, "halo", [](train::TrainOptions& o, int variant) {
    o.halo = variant == 0 ? parallel::HaloMode::blocking : parallel::HaloMode::overlap;
  });
}

TEST_F(DistTrain, ThreeStepsEqualOneProcessAndRepeatBitwise) {
  std::FILE* null = std::fopen("/dev/null", "w");
  std::map<std::string, Tensor> single;
  if (test::world_rank() == 0) {
    train::Trainer t(tiny(), null);
    t.run();
    single = as_map(run::model_tensors(t.model()));
  }
  for (const parallel::GridShape& shape : grids(test::world_size())) {
    auto grid = parallel::ProcessGrid::create(shape);
    std::map<std::string, Tensor> first;
    for (int run = 0; run < 2; ++run) {
      train::Trainer t(tiny(), null, grid.get());
      t.run();
      auto weights = as_map(t.whole_model_tensors());
      if (run == 0) {
        first = weights;
        if (test::world_rank() == 0) expect_close(weights, single, "3 steps on " + shape.str(), false, kThreeSteps);
      } else {
        for (const auto& [name, w] : weights)
          EXPECT_TRUE(test::tensors_equal(w, first.at(name))) << shape.str() << " run 2: " << name;
      }
    }
  }
  std::fclose(null);
}

TEST_F(DistTrain, ResumesOnAnotherGrid) {
  std::FILE* null = std::fopen("/dev/null", "w");
  const test::TempDir shared = shared_dir("resume");
  const fs::path& dir = shared.path();
  auto options = [&](const std::string& sub, int64_t steps) {
    return test::resuming(tiny(), (dir / sub).string(), steps);
  };
  world_->world().barrier();
  const parallel::GridShape whole = grids(test::world_size()).back();  // 1 x P: pure batch
  const parallel::GridShape rows = grids(test::world_size()).size() > 1 ? grids(test::world_size())[1] : whole;
  auto grid = parallel::ProcessGrid::create(rows);
  // Saved on the grid after 2 steps, resumed on one process for a third ...
  train::Trainer(options("a", 2), null, grid.get()).run();
  // ... and saved on one process, resumed on the grid.
  std::map<std::string, Tensor> uninterrupted, resumed_single;
  if (test::world_rank() == 0) {
    train::Trainer whole_run(options("ref", 3), null);
    whole_run.run();
    uninterrupted = as_map(run::model_tensors(whole_run.model()));
    train::Trainer resumed(options("a", 3), null);
    EXPECT_EQ(resumed.state().step, 2);
    resumed.run();
    resumed_single = as_map(run::model_tensors(resumed.model()));
    expect_close(resumed_single, uninterrupted, "saved on " + rows.str() + ", resumed on 1x1", false, kThreeSteps);
    train::Trainer(options("b", 2), null).run();
  }
  world_->world().barrier();
  auto back = parallel::ProcessGrid::create(whole);
  train::Trainer resumed_grid(options("b", 3), null, back.get());
  EXPECT_EQ(resumed_grid.state().step, 2);
  resumed_grid.run();
  const auto resumed_weights = as_map(resumed_grid.whole_model_tensors());
  if (test::world_rank() == 0)
    expect_close(resumed_weights, uninterrupted, "saved on 1x1, resumed on " + whole.str(), false, kThreeSteps);
  world_->world().barrier();  // before rank 0 removes the folder
  std::fclose(null);
}

TEST_F(DistTrain, GradientTrafficIsOneAllReducePerBucket) {
  auto grid = parallel::ProcessGrid::create({1, 1, test::world_size()});
  auto o = tiny();
  run::PipelinedModel net(o, *grid);
  data::SyntheticDataset d({8, 0, 3, 1, Shape{24, 24, 20}, 7, 0.15f});
  data::LoaderOptions lo;
  lo.batch = 8;
  const auto shard = run::batch_shard(*grid, 8, 24);
  data::BatchLoader loader(d, run::shard_loader(lo, shard));
  parallel::comm_log().clear();
  Tensor logits;
  net.forward_backward(loader.next(), 8, &logits);
  int64_t params = 0;
  for (auto& [name, p] : net.model().named_parameters()) params += (p->value.numel() + 63) / 64 * 64;
  // Pure batch parallelism: every gradient once over the stage (= col), in whole 256-byte
  // slots of the gradient arena (64 floats), and nothing else but
  // the batch norms' statistics and the loss.
  const int64_t expected = test::world_size() > 1 ? params : 0;
  EXPECT_EQ(parallel::comm_log().elements("", "all_reduce", "gradients"), expected);
  EXPECT_EQ(parallel::comm_log().elements("", "all_gather", ""), 0);
}

}  // namespace
}  // namespace gridnn
