// The cost model on gridnn's own networks, from their own description (models/train/
// step_plan.h, nn::Module::describe): the paper's strategies on the layers ResAttNet3D and
// the MLP describe (closed forms derived here for a few layers on small grids), gridnn's own
// distribution as the modules run it (the hand-over, the loss, the gradients), measured
// compute tables in both, and the timing of the layers for those tables.
// (test_words.cpp checks the described words against a real run.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "models/nets/blocks.h"
#include "models/run/grid_choice.h"
#include "models/run/memory_plan.h"
#include "models/run/step_plan.h"
#include "models/run/timing.h"
#include "plan/cost_model.h"
#include "test/support/plan_terms.h"

namespace gridnn::run {
namespace {

using namespace gridnn::plan;

const Machine kPaper{2e-6, 4.0 / 6e9, 0};

using test::layer_of;
using test::words_of;

double compute_of(const PlanCost& p, const std::string& layer) { return layer_of(p, layer).compute_s; }

size_t block_count(const nn::Module& model) { return dynamic_cast<const nn::BlockNetwork&>(model).block_count(); }

RunOptions resattnet(int64_t width, int64_t classes, std::vector<int64_t> input, int64_t batch) {
  RunOptions o;
  o.resattnet.width = width;
  o.classes = classes;
  o.input = std::move(input);
  o.batch = batch;
  return o;
}

// An MLP over `sizes` = {in, hidden..., classes}, its input [1, in, 1, 1].
RunOptions mlp(const std::vector<int64_t>& sizes, int64_t batch) {
  RunOptions o;
  o.model = run::Model::mlp;
  o.input = {sizes.front(), 1, 1};
  o.mlp_hidden.assign(sizes.begin() + 1, sizes.end() - 1);
  o.classes = sizes.back();
  o.batch = batch;
  return o;
}

TEST(StepPlan, PureModelIsEquationThreeForAnMlp) {
  const Network net = network_of(mlp({1024, 512, 10}, 64));
  const double B = 64, P = 4;
  const PlanCost plan = estimate(net, 64, Grid{4, 1}, kPaper, pure_model());
  // fc1: gather Y (no dX: the input is data); fc2: all-reduce dX, gather Y; no weight traffic.
  EXPECT_DOUBLE_EQ(words_of(plan, "fc1"), (P - 1) / P * B * 512);
  EXPECT_DOUBLE_EQ(words_of(plan, "fc2"), 2 * (P - 1) / P * B * 512 + (P - 1) / P * B * 10);
}

// ResAttNet3D-18, width 8, 1 -> 2 classes, 32³, B = 8: conv1 (1 -> 8, k7 s2 p3, no input
// gradient), layer1.0.conv1 (8 -> 8, k3 s1 p1 on 8³), bn1 (8 channels on 16³), fc (64 -> 2).
class ResAttNetWords : public ::testing::Test {
 protected:
  Network net = network_of(resattnet(8, 2, {32, 32, 32}, 8));
  PlanCost on(int rows, int cols) { return estimate(net, 8, Grid{rows, cols}, kPaper, model_batch_domain()); }
};

TEST_F(ResAttNetWords, TheNetworkDescribesItsLayersInForwardOrder) {
  EXPECT_EQ(net.name, "ResAttNet3D-18");
  ASSERT_EQ(net.layers.size(), 45u);
  EXPECT_EQ(net.layers[0].name, "conv1");
  EXPECT_FALSE(net.layers[0].input_gradient);
  EXPECT_EQ(net.layers[1].name, "bn1");
  EXPECT_EQ(net.layers[2].name, "maxpool");
  EXPECT_EQ(net.layers[3].name, "layer1.0.conv1");
  EXPECT_EQ(net.layers.back().name, "fc");
  EXPECT_EQ(net.layers[net.layers.size() - 2].name, "avgpool");
}

TEST_F(ResAttNetWords, OneByTwoIsPureBatch) {
  const PlanCost p = on(1, 2);
  EXPECT_DOUBLE_EQ(words_of(p, "conv1"), 2 * 0.5 * 2744);           // 8·1·7³ weights
  EXPECT_DOUBLE_EQ(words_of(p, "layer1.0.conv1"), 2 * 0.5 * 1728);  // 8·8·3³
  // sum(x) and the count's 3 digits, second-pass sums, dy sums, γ β
  EXPECT_DOUBLE_EQ(words_of(p, "bn1"), 2 * 0.5 * (8 + 3 + 3 * 16));
  EXPECT_DOUBLE_EQ(words_of(p, "fc"), 2 * 0.5 * 130);  // 64·2 + 2
}

TEST_F(ResAttNetWords, TwoByOneIsPureDomainWithTheFcOnTheRows) {
  const PlanCost p = on(2, 1);
  // Halo of 3 planes of 1·32·32 words for 8 samples, forward only; weights over 2.
  EXPECT_DOUBLE_EQ(words_of(p, "conv1"), 3 * 8 * 32 * 32 + 2744);
  // 1 plane of 8·8·8 each way for 8 samples.
  EXPECT_DOUBLE_EQ(words_of(p, "layer1.0.conv1"), 2 * (8 * 8 * 8 * 8) + 1728);
  // Y gathered (half of 8·2), dX all-reduced (2 · half of 8·64), no W traffic (Pc = 1).
  EXPECT_DOUBLE_EQ(words_of(p, "fc"), 0.5 * 8 * 2 + 2 * 0.5 * 8 * 64);
}

TEST_F(ResAttNetWords, TwoByTwoSplitsBothWays) {
  const PlanCost p = on(2, 2);
  EXPECT_DOUBLE_EQ(words_of(p, "conv1"), 3 * 4 * 32 * 32 + 2 * 0.75 * 2744);
  EXPECT_EQ(layer_of(p, "conv1").terms.size(), 2u);
  EXPECT_DOUBLE_EQ(words_of(p, "layer1.0.conv1"), 2 * (4 * 8 * 8 * 8) + 2 * 0.75 * 1728);
  EXPECT_DOUBLE_EQ(words_of(p, "bn1"), 2 * 0.75 * (8 + 3 + 3 * 16));
  EXPECT_DOUBLE_EQ(words_of(p, "fc"), 0.5 * 4 * 2 + 2 * 0.5 * 4 * 64 + 2 * 0.5 * 65);
  // conv1's messages: one halo, an all-reduce over 4 ranks (2·⌈log2 4⌉).
  double messages = 0;
  for (const CommTerm& t : layer_of(p, "conv1").terms) messages += t.messages;
  EXPECT_DOUBLE_EQ(messages, 1 + 4);
}

// gridnn's own distribution, as the modules describe it (test_words.cpp checks the elements
// against a real run): ResAttNet3D-18, width 2, 24x24x20, B = 8. layer2.0.conv1 (2 -> 4, k3
// s2 on 6x6x5 -> 3 planes) is handed over on 4 x 1: its input gathered (the rank owning 1 of
// the 6 planes receives 5 of 8·2·6·5 words) and its weights reduced over col, which has one
// rank.
TEST(StepPlan, GridnnsOwnRunCountsTheHandoverTheLossAndTheGradients) {
  const RunOptions o = resattnet(2, 3, {24, 24, 20}, 8);
  const PlanCost p41 = estimate_grid(o, {1, 4, 1}, kPaper);
  EXPECT_DOUBLE_EQ(words_of(p41, "layer2.0.conv1"), 5 * 8 * 2 * 6 * 5);
  EXPECT_EQ(layer_of(p41, "layer2.0.conv1").terms.size(), 1u);
  EXPECT_DOUBLE_EQ(words_of(p41, "loss"), 0);
  EXPECT_DOUBLE_EQ(words_of(p41, "fc"), 0);  // replicated; its gradient under "gradients"
  const PlanCost p22 = estimate_grid(o, {1, 2, 2}, kPaper);
  EXPECT_DOUBLE_EQ(words_of(p22, "loss"), 1 * 0.5 * 2);
  // On 1 x 2 every gradient goes over col, once: the whole net's weights, each in a slot of
  // whole 256-byte units (64 floats) of the gradient arena.
  const Network net = network_of(o);
  int64_t weights = 0, slots = 0;
  const PlannedModel planned = planned_model(o, {1, 1, 2}, 0);
  for (auto& [name, p] : planned.model->named_parameters()) {
    weights += p->value.numel();
    slots += (p->value.numel() + 63) / 64 * 64;
  }
  EXPECT_EQ(weights, net.weights());
  const auto e12 = comm_elements(describe_grid(o, {1, 1, 2}).at(1).calls);
  EXPECT_EQ(e12.at({"gradients", "col", "all_reduce"}), slots);
  EXPECT_DOUBLE_EQ(words_of(estimate_grid(o, {1, 1, 2}, kPaper), "gradients"), 2 * 0.5 * double(slots));
  // 3D windows are k³ also on a side of one voxel: layer4.1.conv2 (16 -> 16 on 1x1x1).
  for (const LayerShape& l : net.layers)
    if (l.name == "layer4.1.conv2") {
      EXPECT_EQ(l.weights, 16 * 16 * 27);
    }
  // The sweep holds the usable grids only (a sample per shard, a plane per slab).
  const auto plans = sweep_grids(resattnet(2, 3, {24, 24, 20}, 2), 4, kPaper);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].grid.rows, 2);
  EXPECT_EQ(plans[1].grid.rows, 4);
}

// The switch to the batch split: past it a layer's compute is that of the whole volume on
// this rank's B/Pr samples, against the larger slab's share before it. ResAttNet3D-18 w2 at
// 24x24x20 has 3 planes in layer2 (2 + 1 on 2 rows): layer2.1.conv1's compute is 1/2 of the
// 1 x 1 run's with the switch at layer2.0, 2/3 without. The choice is the cheapest of the
// candidates, and none on a grid of one row.
TEST(StepPlan, BatchSplitComputesOnTheRanksSamplesAndIsChosenByThePredictedStep) {
  RunOptions o = resattnet(2, 3, {24, 24, 20}, 8);
  const Machine m{0, 0, 1e9};
  const double whole = compute_of(estimate_grid(o, {1, 1, 1}, m), "layer2.1.conv1");
  EXPECT_NEAR(compute_of(estimate_grid(o, {1, 2, 1}, m), "layer2.1.conv1"), whole * 2 / 3, whole * 1e-12);
  o.batch_split_from = "layer2.0";
  EXPECT_NEAR(compute_of(estimate_grid(o, {1, 2, 1}, m), "layer2.1.conv1"), whole / 2, whole * 1e-12);
  // Its words: layer2.0's input, 8 samples of 2 channels, 6 x 6 x 5 planes in slabs of 3:
  // each rank sends the other's 4 samples of its 3 planes and receives as many, both ways.
  EXPECT_DOUBLE_EQ(words_of(estimate_grid(o, {1, 2, 1}, kPaper), "batch_split"), 2 * 4 * 2 * 3 * 6 * 5);

  o.batch_split_from.clear();
  const BatchSplitChoice c = choose_batch_split(o, {1, 2, 1}, m);
  EXPECT_LE(c.step_s, c.without_s);
  RunOptions chosen = o;
  chosen.batch_split_from = c.block;
  EXPECT_DOUBLE_EQ(estimate_grid(chosen, {1, 2, 1}, m).total_s(), c.step_s);
  EXPECT_FALSE(c.block.empty()) << c.why;  // compute alone: a switch that balances layer2 is faster
  for (const char* block : {"layer2.0", "layer3.0", "head"}) {
    RunOptions other = o;
    other.batch_split_from = block;
    EXPECT_GE(estimate_grid(other, {1, 2, 1}, m).total_s(), c.step_s) << block;
  }
  EXPECT_TRUE(choose_batch_split(o, {1, 1, 2}, m).block.empty());
  // A best switch less than kBatchSplitMinGain faster than none is not taken: w16 at 96³, B = 4
  // on 2 x 1 at 1e11 FLOP/s, where every candidate is predicted within 1.3% of none.
  const BatchSplitChoice small =
      choose_batch_split(resattnet(16, 2, {96, 96, 96}, 4), {1, 2, 1}, {2e-6, 4 / 6e9, 1e11});
  EXPECT_TRUE(small.block.empty()) << small.why;
  EXPECT_EQ(small.step_s, small.without_s);
  o.batch = 6;  // shards of 6 on 2 x 2 split into 3 + 3 only without micro-batches
  o.micro_batches = 2;
  EXPECT_TRUE(choose_batch_split(o, {1, 2, 2}, m).block.empty());
}

TEST(StepPlan, ComputeTermUsesTheLocalBatch) {
  const Network net = network_of(mlp({100, 10}, 64));
  const Machine m{0, 0, 1e9};
  // 3 x 2·100·10 FLOPs per sample; 1x4: 16 samples of the whole layer; 4x1: 64 of a quarter.
  EXPECT_DOUBLE_EQ(estimate(net, 64, Grid{1, 4}, m, model_batch()).compute_s, 3 * 2000 * 16 / 1e9);
  EXPECT_DOUBLE_EQ(estimate(net, 64, Grid{4, 1}, m, model_batch()).compute_s, 3 * 2000 * 16 / 1e9);
}

TEST(StepPlan, CostModelUsesTheMeasuredTable) {
  RunOptions o = resattnet(8, 2, {16, 16, 16}, 8);
  const Network net = network_of(o);
  const LayerShape& conv1 = net.layers.front();
  ASSERT_EQ(conv1.name, "conv1");
  ASSERT_EQ(conv1.out_size[0], 8);  // 16 -> 8 planes: 4 per rank on 2 rows
  auto tables = std::make_shared<ComputeTables>();
  (*tables)["conv1"] = {conv1.forward_flops, {{1, 0.1}, {2, 0.2}, {4, 0.5}}, {}};
  Machine m{2e-6, 4.0 / 6e9, 1e9, tables};
  // The paper's strategy on the network's layers, and gridnn's own run.
  auto both = [&](int64_t batch, parallel::GridShape g) {
    o.batch = batch;
    return std::vector<PlanCost>{estimate(net, batch, {g.rows, g.cols}, m, model_batch_domain()),
                                 estimate_grid(o, g, m)};
  };
  for (int which : {0, 1}) {
    // 2 x 2, B = 8: local batch 4, half the planes: 0.5 x 4/8.
    EXPECT_DOUBLE_EQ(compute_of(both(8, {1, 2, 2})[which], "conv1"), 0.25);
    // B = 6: local batch 3, interpolated 0.35, half of it.
    EXPECT_DOUBLE_EQ(compute_of(both(6, {1, 2, 2})[which], "conv1"), 0.175);
    // B = 16 on 1 x 2: local batch 8 (twice the largest measured), all planes.
    EXPECT_DOUBLE_EQ(compute_of(both(16, {1, 1, 2})[which], "conv1"), 1.0);
    // A layer without a table keeps the FLOP-rate term: bn1 at local batch 4, half its planes.
    const LayerShape& bn1 = net.layers[1];
    EXPECT_DOUBLE_EQ(compute_of(both(8, {1, 2, 2})[which], "bn1"), 3.0 * bn1.forward_flops * 4 * 0.5 / 1e9);
  }
  // Measured on a shape with half the FLOPs per sample: the time doubles.
  (*tables)["conv1"].forward_flops = conv1.forward_flops / 2;
  EXPECT_DOUBLE_EQ(compute_of(estimate(net, 8, {2, 2}, m, model_batch_domain()), "conv1"), 0.5);
}

// --grid auto on a job of several nodes: every usable grid in both rank orders, each
// communicator at the link its groups cross (plan/node_layout.h), the fastest kept; a given
// order is kept; one node is the flat plan at the node's link.
TEST(StepPlan, GridAutoOnNodesWeighsEachOrderAtItsLinks) {
  const RunOptions o = resattnet(4, 2, {16, 16, 16}, 8);
  const NodeCluster cluster = assumed_cluster(2, 2);
  Machine m;
  m.alpha = cluster.intra.alpha;
  m.beta = cluster.intra.beta;
  double fastest = INFINITY;
  int rows = 0;
  RankOrder order = RankOrder::rows_in_node;
  for (int r : {1, 2, 4})
    for (RankOrder ord : {RankOrder::rows_in_node, RankOrder::cols_in_node}) {
      const Grid g{r, 4 / r};
      const double t = estimate_ranks(describe_grid(o, {1, r, 4 / r}), g, m, links_of(cluster, g, ord)).total_s();
      if (t < fastest) {
        fastest = t;
        rows = r;
        order = ord;
      }
    }
  const GridChoice choice = choose_grid(o, 2, 2, std::nullopt);
  EXPECT_EQ(choice.shape.rows, rows);
  EXPECT_EQ(choice.shape.cols, 4 / rows);
  EXPECT_EQ(choice.order, order);
  EXPECT_NE(choice.why.find("on 2 nodes x 2 ranks (crossing nodes: "), std::string::npos) << choice.why;
  EXPECT_NE(choice.why.find("1x4 rows-in-node, 1x4 cols-in-node"), std::string::npos) << choice.why;

  for (RankOrder given : {RankOrder::rows_in_node, RankOrder::cols_in_node})
    EXPECT_EQ(choose_grid(o, 2, 2, given).order, given);

  const std::vector<PlanCost> flat = sweep_grids(o, 4, m);
  const PlanCost* best = &flat.front();
  for (const PlanCost& p : flat)
    if (p.total_s() < best->total_s()) best = &p;
  const GridChoice one_node = choose_grid(o, 1, 4, std::nullopt);
  EXPECT_EQ(one_node.shape.rows, best->grid.rows);
  EXPECT_EQ(one_node.order, RankOrder::rows_in_node);
  EXPECT_EQ(one_node.why.find("nodes"), std::string::npos) << one_node.why;
}

// On 3 x 1 every convolution, pooling and batch norm a rank runs on a slab has that slab
// timed, the ranks' different slabs once each; attention keeps the whole table (its keys are all
// positions); and the model prices each rank's layer at its own slab, the slowest rank's.
TEST(StepPlan, SlabTimingCoversEveryRanksShape) {
  const RunOptions o = resattnet(4, 2, {20, 12, 12}, 3);
  TimingOptions t;
  t.reps = 1;
  t.warmup = 0;
  ComputeTables tables = time_layers(o, {1, 2}, t);
  const parallel::GridShape grid{1, 3, 1};
  time_slabs(o, grid, {1, 2}, tables, t);
  const Machine m{2e-6, 4.0 / 6e9, 0, std::make_shared<const ComputeTables>(tables)};
  const std::vector<RankStep> ranks = describe_grid(o, grid);
  ASSERT_EQ(ranks.size(), 3u);
  std::map<std::string, double> slowest;
  size_t slabs = 0;
  for (const RankStep& r : ranks)
    for (const LayerShape& l : r.layers) {
      const ComputeTable& table = tables.at(l.name);
      const bool whole = l.forward_flops == table.forward_flops;
      const auto slab =
          std::find_if(table.slabs.begin(), table.slabs.end(), [&](const SlabTable& s) { return s.matches(l); });
      const bool timed = !whole && (l.kind == LayerKind::conv || l.kind == LayerKind::pool || l.kind == LayerKind::bn);
      ASSERT_EQ(slab != table.slabs.end(), timed) << l.name << " on row " << r.row;
      const double s = layer_compute_s(l, double(r.samples), 1.0, m);
      slowest[l.name] = std::max(slowest[l.name], s);
      if (!timed) continue;
      ++slabs;
      for (int64_t b : {1, 2}) EXPECT_TRUE(slab->seconds.at(b) > 0 && slab->seconds.at(b) < 10) << l.name;
      EXPECT_EQ(s, seconds_at(slab->seconds, double(r.samples))) << l.name;
    }
  EXPECT_GT(slabs, 20u);
  EXPECT_TRUE(tables.at("att3").slabs.empty());
  // The stem (kernel 7, stride 2, padding 3) maps 20 planes to 10, split 4, 3, 3 over the
  // rows: row 0 reads input planes [-3, 10) (13, three of them padding), row 1 [5, 16) and
  // row 2 [11, 22) (11 each, the last two padding): two slabs, 13 -> 4 and 11 -> 3 planes.
  const std::vector<SlabTable>& stem = tables.at("conv1").slabs;
  ASSERT_EQ(stem.size(), 2u);
  EXPECT_EQ(stem[0].in_size, (std::array<int64_t, 3>{13, 12, 12}));
  EXPECT_EQ(stem[0].out_size, (std::array<int64_t, 3>{4, 6, 6}));
  EXPECT_EQ(stem[1].in_size, (std::array<int64_t, 3>{11, 12, 12}));
  EXPECT_EQ(stem[1].out_size, (std::array<int64_t, 3>{3, 6, 6}));
  for (const auto& [layer, s] : slowest) EXPECT_EQ(compute_of(estimate_ranks(ranks, {3, 1}, m), layer), s) << layer;
}

TEST(StepPlan, LayerTimingIsPositive) {
  const RunOptions o = resattnet(8, 2, {16, 16, 16}, 8);
  TimingOptions t;
  t.reps = 1;
  t.warmup = 0;
  const ComputeTables tables = time_layers(o, {2}, t);
  EXPECT_EQ(tables.size(), network_of(o).layers.size());
  for (const char* name : {"conv1", "att3", "fc", "maxpool", "layer4.1.bn2"}) {
    ASSERT_TRUE(tables.count(name)) << name;
    const double s = tables.at(name).seconds.at(2);
    EXPECT_TRUE(std::isfinite(s) && s > 0 && s < 10) << name << " " << s;
  }
}

}  // namespace
// On a GPU the convolutions share one workspace buffer, held through the step at their
// largest budget (ops::cuda_conv_workspace_budget: the larger of a convolution's input and
// output in f32): here the stem's input, 8 x 1 x 24 x 24 x 20 floats, 368640 bytes (a whole
// CUDA size class). The device stand-in runs the CPU's kernels on host buffers its allocator
// does not count: no workspace there, and the GPU's peak is the stand-in's plus the buffer.
TEST(MemoryPlan, AGpuHoldsOneConvolutionWorkspaceAtTheLargestBudget) {
  RunOptions o = resattnet(2, 3, {24, 24, 20}, 8);
  o.device = Device{Device::Kind::cuda, 0};
  const std::vector<plan::MemoryPeak> gpu = predict_grid_memory(o, {1, 1, 1}, MemoryJob::training);
  o.device = Device{Device::Kind::cuda_standin, 0};
  const std::vector<plan::MemoryPeak> standin = predict_grid_memory(o, {1, 1, 1}, MemoryJob::training);
  ASSERT_EQ(gpu.size(), 1u);
  ASSERT_EQ(standin.size(), 1u);
  EXPECT_EQ(gpu[0].workspace_bytes, 8 * 24 * 24 * 20 * 4);
  EXPECT_EQ(standin[0].workspace_bytes, 0);
  EXPECT_EQ(gpu[0].peak_bytes, standin[0].peak_bytes + gpu[0].workspace_bytes);
}

// The validation loader's batches are counted as they come: full ones, then a short last one
// of which each batch shard reads only the rows it has (data::BatchLoader). One row, 1x1:
// with 5 samples in batches of 4 the evaluation forward runs 4 rows, beside the batch of 4 and
// the prefetched one of 1; with a single sample it runs 1, alone. On a grid of 2 batch shards
// (rows [0, 2) and [2, 4)), the short batch of 1 leaves the second shard nothing of it.
TEST(MemoryPlan, TheValidationBatchesAreCountedAsTheLoaderReadsThem) {
  RunOptions o = resattnet(2, 3, {24, 24, 20}, 4);
  const parallel::GridShape one{1, 1, 1}, two{1, 1, 2};
  auto step = [&](int64_t val_samples, const parallel::GridShape& grid, int col) {
    o.data.val_samples = val_samples;
    const PlannedModel planned = planned_model(o, grid, 0);
    return memory_step(o, *planned.model, grid, 0, col, {0, block_count(*planned.model), true, true});
  };
  // A batch of n samples of the loader: volumes [n, 1, 24, 24, 20] and labels (host classes).
  auto batch_bytes = [](int64_t n) {
    return nn::stored_bytes(n * 24 * 24 * 20 * 4) + nn::stored_bytes(n * int64_t(sizeof(int64_t)));
  };
  // The evaluation forward's first record, the stem's convolution: its output is per row.
  const plan::MemoryStep full = step(8, one, 0), short_last = step(5, one, 0), single = step(1, one, 0);
  EXPECT_EQ(full.evaluation_batch_bytes, 2 * batch_bytes(4));
  EXPECT_EQ(short_last.evaluation_batch_bytes, batch_bytes(4) + batch_bytes(1));
  EXPECT_EQ(single.evaluation_batch_bytes, batch_bytes(1));
  ASSERT_FALSE(single.evaluation.empty());
  EXPECT_EQ(short_last.evaluation.front().output, full.evaluation.front().output);
  EXPECT_EQ(single.evaluation.front().output * 4, full.evaluation.front().output);
  EXPECT_EQ(step(5, two, 0).evaluation_batch_bytes, batch_bytes(2) + batch_bytes(1));
  EXPECT_EQ(step(5, two, 1).evaluation_batch_bytes, batch_bytes(2));
  EXPECT_TRUE(step(0, one, 0).evaluation.empty());  // no validation set: no evaluation
}

// On a GPU the batch's copy on the device lives through the training step alone (the device
// stand-in states the same): validation holds its own batch's copy instead. A later stage
// copies no batch: it holds the activation it receives, in training for each micro-batch's
// recomputation (the stash), in validation while its blocks run.
TEST(MemoryPlan, TheBatchOnTheDeviceIsTheTrainingSteps) {
  RunOptions o = resattnet(2, 3, {24, 24, 20}, 4);
  o.device = Device{Device::Kind::cuda_standin, 0};
  o.data.val_samples = 1;
  const PlannedModel planned = planned_model(o, {1, 1, 1}, 0);
  const size_t blocks = block_count(*planned.model);
  const plan::MemoryStep first = memory_step(o, *planned.model, {1, 1, 1}, 0, 0, {0, blocks, true, true});
  nn::SizeClassScope classes(o.device);
  EXPECT_EQ(first.device_batch_bytes, nn::stored_bytes(4 * 24 * 24 * 20 * 4));
  EXPECT_EQ(first.evaluation_batch_bytes, nn::stored_bytes(1 * 24 * 24 * 20 * 4));
  for (const plan::MemoryItem& item : first.resident)
    EXPECT_EQ(item.what.find("batch"), std::string::npos) << item.what;
  o.data.val_samples = 4;  // one whole batch, as in training
  const plan::MemoryStep later = memory_step(o, *planned.model, {1, 1, 1}, 0, 0, {1, blocks, false, true});
  EXPECT_EQ(later.device_batch_bytes, 0);
  EXPECT_GT(later.micro_batch_stash, 0);
  EXPECT_EQ(later.evaluation_batch_bytes, later.micro_batch_stash);
}

}  // namespace gridnn::run
