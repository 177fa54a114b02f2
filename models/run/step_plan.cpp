// The cost model's view of a training step, from the live network (step_plan.h).
#include "models/run/step_plan.h"

#include <cstdio>
#include <map>

#include "core/error.h"
#include "models/dist/factory.h"
#include "models/nets/blocks.h"
#include "models/run/gradient_sync.h"
#include "models/run/grid_batch.h"
#include "models/run/memory_plan.h"
#include "models/run/pipelined_model.h"

namespace gridnn::run {

plan::RankStep describe_step(nn::Module& model, const parallel::GridShape& grid, int row, int col, int64_t batch,
                             const Shape& sample, Recompute recompute) {
  GRIDNN_REQUIRE(sample.rank() == 4, "describe_step: a sample is [C, D, H, W], got ", sample.str());
  plan::RankStep step;
  step.row = row;
  step.col = col;
  step.samples = shard_rows(grid, col, batch).size();
  const int64_t planes = shard_planes(grid, row, sample[1]).size();
  const Shape input{step.samples, sample[0], planes, sample[2], sample[3]};
  const auto* net = dynamic_cast<const nn::BlockNetwork*>(&model);
  if (recompute == Recompute::none || !net) {
    model.describe(input, step);
  } else {  // block by block: a recomputed block's forward collectives run again before its backward
    Shape s = input;
    std::vector<plan::CommCall> again;
    for (size_t i = 0; i < net->block_count(); ++i) {
      const size_t first = step.calls.size();
      s = net->describe_block(i, s, step);
      if (net->recomputable(i))
        for (size_t k = first; k < step.calls.size(); ++k)
          if (!step.calls[k].backward) again.push_back(step.calls[k]);
    }
    step.calls.insert(step.calls.end(), again.begin(), again.end());
  }
  // The loss over the global batch (run::sum_over_batch), and the gradients.
  if (grid.cols > 1) step.calls.push_back(plan::make_call("loss", "col", "all_reduce", 1, grid.cols));
  std::map<std::string, std::pair<int64_t, int>> gradients;  // communicator -> elements, size
  for (auto& [name, p] : model.named_parameters()) {
    const parallel::Communicator* comm = p->layout.grad_sum_over;
    if (!comm || comm->size() < 2) continue;
    gradients[comm->name()].first += gradient_slot_elements(p->value.numel());
    gradients[comm->name()].second = comm->size();
  }
  for (const auto& [comm, n] : gradients)
    step.calls.push_back(plan::make_call("gradients", comm, "all_reduce", n.first, n.second));
  return step;
}

PlannedModel planned_model(const RunOptions& o, const parallel::GridShape& grid, int row) {
  const parallel::GridShape one_stage{1, grid.rows, grid.cols};
  PlannedModel p;
  p.grid = parallel::ProcessGrid::planned(one_stage, 0, row, 0);
  p.layers = layers_for(*p.grid, o);
  p.model = build_model(o, *p.layers, false);
  return p;
}

std::vector<plan::RankStep> describe_grid(const RunOptions& o, const parallel::GridShape& grid) {
  const Shape sample{o.in_channels, o.input[0], o.input[1], o.input[2]};
  const parallel::GridShape one_stage{1, grid.rows, grid.cols};
  std::vector<plan::RankStep> steps;
  for (int r = 0; r < grid.rows; ++r) {
    const PlannedModel planned = planned_model(o, grid, r);
    for (int c = 0; c < grid.cols; ++c)
      steps.push_back(describe_step(*planned.model, one_stage, r, c, o.batch, sample, o.recompute));
  }
  return steps;
}

plan::PlanCost estimate_grid(const RunOptions& o, const parallel::GridShape& grid, const plan::Machine& m) {
  return plan::estimate_ranks(describe_grid(o, grid), plan::Grid{grid.rows, grid.cols}, m);
}

BatchSplitChoice choose_batch_split(const RunOptions& o, const parallel::GridShape& grid, const plan::Machine& m) {
  RunOptions none = o;
  none.batch_split_from.clear();
  BatchSplitChoice choice;
  choice.without_s = choice.step_s = estimate_grid(none, grid, m).total_s();
  auto ms = [](double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f ms", 1e3 * s);
    return std::string(text);
  };
  choice.why = "none " + ms(choice.without_s);
  if (grid.rows == 1 || o.model != Model::resattnet3d) return choice;
  const PlannedModel one = planned_model(none, {1, 1, 1}, 0);
  for (const std::string& block : dynamic_cast<const nn::BlockNetwork&>(*one.model).block_names()) {
    RunOptions with = o;
    with.batch_split_from = block;
    if (!batch_split_fits(with, grid)) break;  // the same for every block

    if (o.memory_limit > 0 && largest_peak(predict_grid_memory(with, grid)) > o.memory_limit) continue;
    const double s = estimate_grid(with, grid, m).total_s();
    choice.why += ", " + block + " " + ms(s);
    if (s < choice.step_s) {
      choice.step_s = s;
      choice.block = block;
    }
  }
  if (choice.step_s > (1 - kBatchSplitMinGain) * choice.without_s) {  // within what the model resolves
    choice.step_s = choice.without_s;
    choice.block.clear();
  }
  return choice;
}

bool usable_grid(const RunOptions& o, int rows, int cols) {
  return cols <= o.batch && rows <= o.input[0] && batch_split_fits(o, {1, rows, cols});
}

std::vector<plan::PlanCost> sweep_grids(const RunOptions& o, int procs, const plan::Machine& m) {
  GRIDNN_REQUIRE(procs >= 1, "the number of processes must be >= 1, got ", procs);
  std::vector<plan::PlanCost> plans;
  for (int rows = 1; rows <= procs; ++rows)
    if (procs % rows == 0 && usable_grid(o, rows, procs / rows))
      plans.push_back(estimate_grid(o, {1, rows, procs / rows}, m));
  return plans;
}

plan::Network network_of(const RunOptions& o) {
  const std::vector<plan::RankStep> one = describe_grid(o, {1, 1, 1});
  return plan::network_of(one.front(),
                          o.model == Model::mlp ? "MLP" : "ResAttNet3D-" + std::to_string(o.resattnet.depth));
}

std::vector<plan::NodePlan> sweep_grids_on_nodes(const RunOptions& o, const plan::NodeCluster& c,
                                                 const plan::Machine& m) {
  plan::check_cluster(c);
  const int procs = c.procs();
  std::vector<plan::NodePlan> plans;
  for (int rows = 1; rows <= procs; ++rows) {
    if (procs % rows != 0 || !usable_grid(o, rows, procs / rows)) continue;
    const plan::Grid g{rows, procs / rows};
    const std::vector<plan::RankStep> steps = describe_grid(o, {1, g.rows, g.cols});
    for (parallel::RankOrder order : {parallel::RankOrder::rows_in_node, parallel::RankOrder::cols_in_node})
      plans.push_back(
          {order, plan::crossing(c, g, order), plan::estimate_ranks(steps, g, m, plan::links_of(c, g, order))});
  }
  return plans;
}

}  // namespace gridnn::run
