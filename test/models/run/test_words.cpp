// The cost model's words against a real run (docs/design.md §6): under mpiexec -n 2 and 4,
// one training step of a small ResAttNet3D (and an MLP) on the grids 1 x P, P x 1 and (at 4)
// 2 x 2; every rank compares what its communicators counted (CommLog, summed by layer,
// communicator and operation, entries of 0 elements left out) with the step the network
// describes for its own position (row, col) — the live model's (run::describe_step) and
// the one built on a planning grid, as `--grid auto` and gridnn-plan estimate it
// (run::describe_grid): halo planes and batch rows depend on the rank, so each rank is
// checked against its own prediction, exactly. The gradient all-reduce appears there per
// group ("gradients" over stage and col); its total must also be the model's parameter
// count wherever both groups have more than one rank, or the count of the group that does.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "models/data/synthetic.h"
#include "models/run/grid_batch.h"
#include "models/run/pipelined_model.h"
#include "models/run/step_plan.h"
#include "models/run/whole_state.h"
#include "parallel/process_grid.h"
#include "plan/cost_model.h"
#include "test/support/grid_invariance.h"
#include "test/support/mpi_main.h"

namespace gridnn {
namespace {

using Counts = std::map<plan::CommKey, int64_t>;

std::vector<parallel::GridShape> shapes(int n) {
  std::vector<parallel::GridShape> out{{1, 1, n}, {1, n, 1}};
  if (n == 4) out.push_back({1, 2, 2});
  return out;
}

Counts counted() {
  Counts out;
  for (const parallel::CommRecord& r : parallel::comm_log().records()) out[{r.layer, r.comm, r.op}] += r.elements;
  return out;
}

Counts without_zeros(Counts c) {
  for (auto it = c.begin(); it != c.end();) it = it->second == 0 ? c.erase(it) : std::next(it);
  return c;
}

std::string str(const Counts& c) {
  std::ostringstream s;
  for (const auto& [key, n] : c)
    s << "  " << std::get<0>(key) << " | " << std::get<1>(key) << " | " << std::get<2>(key) << " | " << n << "\n";
  return s.str();
}

// Every key of either side whose counts differ, with both numbers.
void expect_equal(const Counts& got, const Counts& want, const std::string& where) {
  Counts keys = got;
  keys.insert(want.begin(), want.end());
  int bad = 0;
  for (const auto& [key, unused] : keys) {
    const int64_t g = got.count(key) ? got.at(key) : 0, w = want.count(key) ? want.at(key) : 0;
    if (g != w) ++bad;
    EXPECT_EQ(g, w) << where << ": " << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key)
                    << " (counted vs predicted)";
  }
  if (bad) ADD_FAILURE() << where << ": counted\n" << str(got) << "predicted\n" << str(want);
}

// The gradient arena's elements for the parameters this rank holds (1.5D layers: its row
// blocks): each gradient in whole 256-byte units (64 floats).
int64_t gradient_slots(run::PipelinedModel& net) {
  int64_t n = 0;
  for (auto& [name, p] : net.model().named_parameters()) n += (p->value.numel() + 63) / 64 * 64;
  return n;
}
int64_t whole_parameters(run::PipelinedModel& net) {
  int64_t n = 0;
  for (auto& [name, p] : net.model().named_parameters()) n += run::whole_shape(*p, p->value).numel();
  return n;
}

// What rank (row, col) of `shape` describes for one step of `o`: the live model's, which
// must equal the planning grid's.
Counts predicted(run::PipelinedModel& net, const train::TrainOptions& o, const parallel::GridShape& shape,
                 const parallel::ProcessGrid& grid) {
  const Shape sample{o.in_channels, o.input[0], o.input[1], o.input[2]};
  const plan::RankStep live =
      run::describe_step(net.model(), shape, grid.row_rank(), grid.col_rank(), o.batch, sample, o.recompute);
  const plan::RankStep planned =
      run::describe_grid(o, shape).at(size_t(grid.row_rank() * shape.cols + grid.col_rank()));
  const Counts want = without_zeros(plan::comm_elements(live.calls));
  EXPECT_EQ(without_zeros(plan::comm_elements(planned.calls)), want) << "the planning grid's description";
  return want;
}

// With --recompute blocks too: the recomputed blocks' forward collectives count twice. And
// with the switch to the batch split (--batch-split-from) at the stem, in the middle (from
// depth slabs at 2 rows, from replicated layers at 4) and at an attention block.
TEST(Words, ResAttNetPredictionEqualsTheCounts) {
  const int n = test::world_size();
  const std::pair<run::Recompute, const char*> cases[] = {{run::Recompute::none, ""},
                                                          {run::Recompute::blocks, ""},
                                                          {run::Recompute::none, "stem"},
                                                          {run::Recompute::blocks, "layer3.0"},
                                                          {run::Recompute::none, "att4"}};
  for (const parallel::GridShape& shape : shapes(n))
    for (const auto& [recompute, split] : cases) {
      auto grid = parallel::ProcessGrid::create(shape);
      train::TrainOptions o;
      o.recompute = recompute;
      o.batch_split_from = split;
      o.resattnet.width = 2;  // at 4 rows layer2.0 hands over; at 2 rows layer4.0
      o.classes = 3;
      o.input = {24, 24, 20};
      o.batch = 8;
      run::PipelinedModel net(o, *grid);
      const data::Batch batch = test::tiny_batch_shard(*grid);
      parallel::comm_log().clear();
      Tensor logits;
      net.forward_backward(batch, 8, &logits);

      EXPECT_EQ(run::network_of(o).weights(), whole_parameters(net)) << shape.str();
      const Counts want = predicted(net, o, shape, *grid);
      const std::string where = shape.str() + " rank (" + std::to_string(grid->row_rank()) + ", " +
                                std::to_string(grid->col_rank()) + "), --recompute " + enum_name(recompute) +
                                ", --batch-split-from " + split;
      expect_equal(without_zeros(counted()), want, where);

      // The gradients: every parameter (block) this rank holds once, in whichever group
      // reduces it.
      int64_t grads = 0;
      for (const char* comm : {"stage", "col"}) {
        const auto it = want.find({"gradients", comm, "all_reduce"});
        if (it != want.end()) grads += it->second;
      }
      if (shape.rows == 1 || shape.cols > 1) {  // 1 x P: all over col (= the stage)
        EXPECT_EQ(grads, gradient_slots(net)) << where;
      }
    }
}

TEST(Words, MlpPredictionEqualsTheCounts) {
  const int n = test::world_size();
  for (const parallel::GridShape& shape : shapes(n)) {
    auto grid = parallel::ProcessGrid::create(shape);
    train::TrainOptions o;
    o.model = run::Model::mlp;
    o.mlp_hidden = {16, 8};
    o.classes = 3;
    o.input = {8, 6, 5};
    o.batch = 6;
    run::PipelinedModel net(o, *grid);
    data::SyntheticDataset d({6, 0, 3, 1, Shape{8, 6, 5}, 7, 0.15f});
    data::LoaderOptions lo;
    lo.batch = 6;
    data::BatchLoader loader(d, run::shard_loader(lo, run::batch_shard(*grid, 6, 8)));
    const data::Batch batch = loader.next();
    parallel::comm_log().clear();
    Tensor logits;
    net.forward_backward(batch, 6, &logits);

    EXPECT_EQ(run::network_of(o).weights(), whole_parameters(net)) << shape.str();
    const Counts want = predicted(net, o, shape, *grid);
    expect_equal(without_zeros(counted()), want, shape.str() + " rank " + std::to_string(test::world_rank()));
  }
}

}  // namespace
}  // namespace gridnn
