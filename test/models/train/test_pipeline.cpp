// Pipeline stages (docs/design.md §7, models/run/pipelined_model.h), under mpiexec -n 1, 2, 4: on every
// grid Ps x Pr x Pc of the job (Ps > 1 stages, each stage Pr x Pc), a training step with one
// micro-batch (--dump-step: logits, loss, every gradient, every updated tensor) equals the
// single-process step — bitwise when each stage is one process, within the grid tests' 1e-4
// otherwise; the MLP (no batch norm) with M = 2 and 4 micro-batches equals it as well; with
// batch norm, micro-batches change the statistics by design, so ResAttNet3D with M = 2 is
// compared with itself unpipelined; three trainer steps equal the single-process run; a run
// saved with stages resumes on one process (and the other way); placements from a file (in
// any device order) and from GABRA give the same step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "models/data/synthetic.h"
#include "models/train/trainer.h"
#include "parallel/process_grid.h"
#include "plan/placement.h"
#include "test/support/error_message.h"
#include "test/support/grid_invariance.h"
#include "test/support/mpi_main.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;

// Every Ps x Pr x Pc with Ps > 1 (at most `max_stages`) and Ps * Pr * Pc = n.
std::vector<parallel::GridShape> pipeline_grids(int n, int max_stages) {
  std::vector<parallel::GridShape> out;
  for (int stages = 2; stages <= std::min(n, max_stages); ++stages) {
    if (n % stages) continue;
    const int rest = n / stages;
    for (int rows = 1; rows <= rest; ++rows)
      if (rest % rows == 0) out.push_back({stages, rows, rest / rows});
  }
  return out;
}

using test::as_map;
using test::expect_close;
train::TrainOptions tiny() { return test::tiny_resattnet(); }
train::TrainOptions tiny_mlp() { return test::tiny_mlp(); }

// A folder every rank shares (rank 0 makes and removes it).
test::TempDir shared_dir(const std::string& what) { return test::shared_temp_dir("pipeline_" + what); }

// The whole job as one grid, for barriers between the parts of a test.
std::unique_ptr<parallel::ProcessGrid>& job() {
  static std::unique_ptr<parallel::ProcessGrid> grid;
  return grid;
}
void barrier() { job()->world().barrier(); }

class Pipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { job() = parallel::ProcessGrid::create({1, test::world_size(), 1}); }
  static void TearDownTestSuite() { job().reset(); }
};

// Writes a batch of reference.batch samples and the 1x1 step of `reference` (rank 0), returns
// the folder.
test::TempDir prepare(const std::string& what, const train::TrainOptions& reference) {
  test::TempDir shared = shared_dir(what);
  const fs::path& dir = shared.path();
  if (test::world_rank() == 0) {
    const int64_t n = reference.batch;
    data::SyntheticDataset d({n, 0, 3, 1, Shape{24, 24, 20}, 7, 0.15f});
    data::BatchLoader loader(d, {n, false, true, 7, false, 0, -1, {}, false});
    const data::Batch b = loader.next();
    save_safetensors((dir / "batch.safetensors").string(), {{"x", b.x}, {"y", b.y}});
    train::dump_step(reference, (dir / "batch.safetensors").string(), (dir / "reference.safetensors").string());
  }
  return shared;
}

std::map<std::string, Tensor> dump_on(const train::TrainOptions& o, const parallel::GridShape& shape,
                                      const fs::path& dir) {
  auto grid = parallel::ProcessGrid::create(shape);
  const std::string out = (dir / (shape.str() + ".safetensors")).string();
  train::dump_step(o, (dir / "batch.safetensors").string(), out, grid.get());
  return test::world_rank() == 0 ? as_map(load_safetensors(out).tensors) : std::map<std::string, Tensor>{};
}

std::map<std::string, Tensor> reference(const fs::path& dir) {
  return as_map(load_safetensors((dir / "reference.safetensors").string()).tensors);
}

void one_micro_batch_on_every_grid(const train::TrainOptions& o, const std::string& model, int blocks) {
  const test::TempDir shared = prepare("dump_" + model, o);
  const fs::path& dir = shared.path();
  barrier();
  for (const parallel::GridShape& shape : pipeline_grids(test::world_size(), blocks)) {
    const auto got = dump_on(o, shape, dir);
    // One process per stage runs the very kernels of the 1x1 run in the same order.
    if (test::world_rank() == 0)
      expect_close(got, reference(dir), model + " on " + shape.str(), shape.rows * shape.cols == 1);
  }
  barrier();  // before rank 0 removes the folder
}

TEST_F(Pipeline, ResAttNetStepWithStagesEqualsOneProcess) { one_micro_batch_on_every_grid(tiny(), "resattnet3d", 12); }

TEST_F(Pipeline, MlpStepWithStagesEqualsOneProcess) { one_micro_batch_on_every_grid(tiny_mlp(), "mlp", 3); }

TEST_F(Pipeline, MlpMicroBatchesEqualOneProcess) {
  const test::TempDir shared = prepare("micro_mlp", tiny_mlp());
  const fs::path& dir = shared.path();
  barrier();
  std::vector<parallel::GridShape> shapes = pipeline_grids(test::world_size(), 3);
  shapes.insert(shapes.begin(), {1, 1, test::world_size()});  // micro-batches without stages
  for (int m : {2, 4}) {
    auto o = tiny_mlp();
    o.micro_batches = m;
    for (const parallel::GridShape& shape : shapes) {
      if (8 / shape.cols < m) continue;  // each batch shard needs M rows
      const auto got = dump_on(o, shape, dir);
      if (test::world_rank() == 0)
        expect_close(got, reference(dir), "mlp, " + std::to_string(m) + " micro-batches, " + shape.str());
    }
  }
  barrier();  // before rank 0 removes the folder
}

TEST_F(Pipeline, BatchNormMicroBatchesDoNotDependOnTheGrid) {
  // With batch norm, M = 2 normalizes each half batch on its own: not the 1x1 step, but the
  // same step on any grid and however many stages run it (the micro-batches interleave the
  // global batch, and the recomputation leaves the running statistics as one pass over each
  // micro-batch leaves them).
  auto o = tiny();
  o.micro_batches = 2;
  // Micro-batches of 8 samples, as test_dist_train's batches: with 4, the batch norms' sums
  // cancel so much that the grids' summation orders part by 1.4e-4.
  o.batch = 16;
  const test::TempDir shared = prepare("micro_bn", o);
  const fs::path& dir = shared.path();  // the reference: 1x1, 2 micro-batches
  barrier();
  std::vector<parallel::GridShape> shapes = pipeline_grids(test::world_size(), 12);
  const int n = test::world_size();
  if (n > 1) shapes.insert(shapes.begin(), {{1, 1, n}, {1, n, 1}});  // one stage, batch or depth split
  for (const parallel::GridShape& shape : shapes) {
    const auto got = dump_on(o, shape, dir);
    if (test::world_rank() == 0)
      expect_close(got, reference(dir), "resattnet3d, 2 micro-batches, " + shape.str(), shape.rows * shape.cols == 1);
  }
  // The reference itself, against the network run by hand: forward and backward of each
  // half batch in turn, gradients accumulating, running statistics updated once per half.
  if (test::world_rank() == 0) {
    const auto batch = load_safetensors((dir / "batch.safetensors").string()).tensors;
    auto model = run::build_model(o);
    model->train();
    nn::SoftmaxCrossEntropy loss;
    model->zero_grad();
    // Micro-batch m: the rows i with i % 2 == m.
    const int64_t half = o.batch / 2;
    for (int m : {0, 1}) {
      Tensor x = Tensor::empty(batch.at("x").shape().with(0, half)), y = Tensor::empty(Shape{half}, DType::i64);
      for (int64_t k = 0; k < half; ++k) {
        x.narrow(k, 1).copy_from(batch.at("x").narrow(2 * k + m, 1));
        y.narrow(k, 1).copy_from(batch.at("y").narrow(2 * k + m, 1));
      }
      loss.forward(model->forward(x), y);
      model->backward(loss.backward(o.batch));
    }
    std::map<std::string, Tensor> by_hand, pipelined;
    const auto ref = reference(dir);
    for (auto& [name, p] : model->named_parameters()) {
      by_hand["grad." + name] = p->grad;
      pipelined["grad." + name] = ref.at("grad." + name);
    }
    for (auto& [name, b] : model->named_buffers()) {
      by_hand[name] = *b;
      pipelined[name] = ref.at(name);
    }
    // Not bitwise: the pipeline runs the second half's backward first (GEMMs that add into a
    // gradient round differently in the other order).
    expect_close(pipelined, by_hand, "1 stage, 2 micro-batches against the layers run by hand");
  }
  // And it differs from the full-batch step (the test would not notice a pipeline that
  // ignored the micro-batches otherwise).
  if (test::world_rank() == 0) {
    train::dump_step(tiny(), (dir / "batch.safetensors").string(), (dir / "full.safetensors").string());
    const auto full = as_map(load_safetensors((dir / "full.safetensors").string()).tensors);
    EXPECT_FALSE(test::tensors_equal(full.at("grad.conv1.weight"), reference(dir).at("grad.conv1.weight")));
  }
  barrier();  // before rank 0 removes the folder
}

TEST_F(Pipeline, PlacementFileInAnyDeviceOrderAndAutoGiveTheSameStep) {
  const int n = test::world_size();
  if (n < 2) GTEST_SKIP() << "needs stages";
  const test::TempDir shared = prepare("placement", tiny());
  const fs::path& dir = shared.path();
  // Partition k on stage group n-1-k, cut after the stem and after layer2.1.
  plan::Placement p;
  p.blocks = {"stem",     "layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0",
              "layer3.1", "att3",     "layer4.0", "layer4.1", "att4",     "head"};
  p.first_block = n == 2 ? std::vector<int>{0, 5} : std::vector<int>{0, 1, 5, 9};
  for (int k = 0; k < n; ++k) p.device.push_back(n - 1 - k);
  const std::string file = (dir / "placement.json").string();
  if (test::world_rank() == 0) plan::write_text_file(file, plan::placement_json(p));
  barrier();
  for (const std::string& how : {file, std::string("auto")}) {
    auto o = tiny();
    o.placement = how;
    const auto got = dump_on(o, {n, 1, 1}, dir);
    if (test::world_rank() == 0) expect_close(got, reference(dir), "placement " + how, true);
  }
  // A placement for another number of stages is refused with a message saying so.
  if (n == 2) {
    plan::Placement three = p;
    three.first_block = {0, 3, 6};
    three.device = {0, 1, 2};
    if (test::world_rank() == 0) plan::write_text_file(file, plan::placement_json(three));
    barrier();
    auto o = tiny();
    o.placement = file;
    auto grid = parallel::ProcessGrid::create({2, 1, 1});
    const std::string message = test::error_message([&] { run::PipelinedModel net(o, *grid); });
    EXPECT_NE(message.find("device"), std::string::npos) << message;
  }
  barrier();  // before rank 0 removes the folder
}

TEST_F(Pipeline, ThreeStepsEqualOneProcessAndResumeAcrossStages) {
  const int n = test::world_size();
  if (n < 2) GTEST_SKIP() << "needs stages";
  std::FILE* null = std::fopen("/dev/null", "w");
  const test::TempDir shared = shared_dir("resume");
  const fs::path& dir = shared.path();
  auto options = [&](const std::string& sub, int64_t steps) {
    return test::resuming(tiny(), (dir / sub).string(), steps);
  };
  barrier();
  const parallel::GridShape staged{n, 1, 1};
  std::map<std::string, Tensor> uninterrupted;
  if (test::world_rank() == 0) {
    train::Trainer whole_run(options("ref", 3), null);
    whole_run.run();
    uninterrupted = as_map(run::model_tensors(whole_run.model()));
  }
  {
    // Three steps with stages, every stage then holding the whole model after the save.
    auto grid = parallel::ProcessGrid::create(staged);
    train::Trainer t(options("staged", 3), null, grid.get());
    t.run();
    const auto weights = as_map(t.whole_model_tensors());
    if (test::world_rank() == 0) expect_close(weights, uninterrupted, "3 steps on " + staged.str(), true);
  }
  {
    // Saved with stages after 2 steps, resumed on one process.
    auto grid = parallel::ProcessGrid::create(staged);
    train::Trainer(options("a", 2), null, grid.get()).run();
  }
  if (test::world_rank() == 0) {
    train::Trainer resumed(options("a", 3), null);
    EXPECT_EQ(resumed.state().step, 2);
    resumed.run();
    expect_close(as_map(run::model_tensors(resumed.model())), uninterrupted,
                 "saved on " + staged.str() + ", resumed on 1x1", true);
    train::Trainer(options("b", 2), null).run();
  }
  barrier();
  {
    // Saved on one process, resumed with stages.
    auto grid = parallel::ProcessGrid::create(staged);
    train::Trainer resumed(options("b", 3), null, grid.get());
    EXPECT_EQ(resumed.state().step, 2);
    resumed.run();
    const auto weights = as_map(resumed.whole_model_tensors());
    if (test::world_rank() == 0) expect_close(weights, uninterrupted, "saved on 1x1, resumed on " + staged.str(), true);
  }
  barrier();  // before rank 0 removes the folder
  std::fclose(null);
}

}  // namespace
}  // namespace gridnn
