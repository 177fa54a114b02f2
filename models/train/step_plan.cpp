// The cost model's view of a training step, from the live network (step_plan.h).
#include "models/train/step_plan.h"

#include <cstdio>
#include <map>

#include "core/bytes.h"
#include "core/error.h"
#include "models/dist/factory.h"
#include "models/nets/blocks.h"
#include "models/train/grid_batch.h"
#include "models/train/memory_plan.h"

namespace gridnn::train {

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
  // The loss over the global batch (train::sum_over_batch), and the gradients.
  if (grid.cols > 1) step.calls.push_back(plan::make_call("loss", "col", "all_reduce", 1, grid.cols));
  std::map<std::string, std::pair<int64_t, int>> gradients;  // communicator -> elements, size
  for (auto& [name, p] : model.named_parameters()) {
    const parallel::Communicator* comm = p->layout.grad_sum_over;
    if (!comm || comm->size() < 2) continue;
    gradients[comm->name()].first += p->grad.numel();
    gradients[comm->name()].second = comm->size();
  }
  for (const auto& [comm, n] : gradients)
    step.calls.push_back(plan::make_call("gradients", comm, "all_reduce", n.first, n.second));
  return step;
}

PlannedModel planned_model(const TrainOptions& o, const parallel::GridShape& grid, int row) {
  const parallel::GridShape one_stage{1, grid.rows, grid.cols};
  PlannedModel p;
  p.grid = parallel::ProcessGrid::planned(one_stage, 0, row, 0);
  if (grid.rows * grid.cols == 1)
    p.layers = std::make_unique<nn::LayerFactory>();
  else
    p.layers = std::make_unique<nn::GridLayerFactory>(*p.grid);
  p.model = build_model(o, *p.layers, false);
  return p;
}

std::vector<plan::RankStep> describe_grid(const TrainOptions& o, const parallel::GridShape& grid) {
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

plan::PlanCost estimate_grid(const TrainOptions& o, const parallel::GridShape& grid, const plan::Machine& m) {
  return plan::estimate_ranks(describe_grid(o, grid), plan::Grid{grid.rows, grid.cols}, m);
}

bool usable_grid(const TrainOptions& o, int rows, int cols) { return cols <= o.batch && rows <= o.input[0]; }

std::vector<plan::PlanCost> sweep_grids(const TrainOptions& o, int procs, const plan::Machine& m) {
  GRIDNN_REQUIRE(procs >= 1, "the number of processes must be >= 1, got ", procs);
  std::vector<plan::PlanCost> plans;
  for (int rows = 1; rows <= procs; ++rows)
    if (procs % rows == 0 && usable_grid(o, rows, procs / rows))
      plans.push_back(estimate_grid(o, {1, rows, procs / rows}, m));
  return plans;
}

plan::Network network_of(const TrainOptions& o) {
  const std::vector<plan::RankStep> one = describe_grid(o, {1, 1, 1});
  return plan::network_of(one.front(),
                          o.model == Model::mlp ? "MLP" : "ResAttNet3D-" + std::to_string(o.resattnet.depth));
}

std::vector<plan::NodePlan> sweep_grids_on_nodes(const TrainOptions& o, const plan::NodeCluster& c,
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

plan::NodeCluster assumed_cluster(int nodes, int ranks_per_node) {
  plan::NodeCluster c;
  c.nodes = nodes;
  c.ranks_per_node = ranks_per_node;
  c.intra = {2e-6, 4.0 / 10e9};
  c.inter = {2e-6, 4.0 / 6e9};
  return c;
}

GridChoice choose_grid(const TrainOptions& o, int nodes, int ranks_per_node, std::optional<parallel::RankOrder> order) {
  const plan::NodeCluster cluster = assumed_cluster(nodes, ranks_per_node);
  const int procs = cluster.procs();
  plan::Machine machine;  // compute is left out: it is the same on every grid
  machine.alpha = cluster.intra.alpha;
  machine.beta = cluster.intra.beta;
  // The candidates: on one node every grid at the node's link; on several, each grid in each
  // rank order (or the one given) at the links it crosses.
  std::vector<plan::NodePlan> plans;
  if (nodes == 1) {
    for (const plan::PlanCost& p : sweep_grids(o, procs, machine))
      plans.push_back({order.value_or(parallel::RankOrder::rows_in_node), {}, p});
  } else {
    for (const plan::NodePlan& p : sweep_grids_on_nodes(o, cluster, machine))
      if (!order || p.order == *order) plans.push_back(p);
  }
  auto name = [&](const plan::NodePlan& p) {
    std::string n = std::to_string(p.cost.grid.rows) + "x" + std::to_string(p.cost.grid.cols);
    return nodes == 1 || order ? n : n + " " + enum_name(p.order);
  };
  std::string considered, too_large;
  const plan::NodePlan* best = nullptr;
  for (const plan::NodePlan& p : plans) {
    considered += (considered.empty() ? "" : ", ") + name(p);
    if (o.memory_limit > 0) {  // only the grids whose every rank fits --memory-limit
      const int64_t peak = largest_peak(predict_grid_memory(o, {1, p.cost.grid.rows, p.cost.grid.cols}));
      if (peak > o.memory_limit) {
        too_large += (too_large.empty() ? "" : ", ") + name(p) + " " + format_bytes(peak);
        continue;
      }
    }
    if (!best || p.cost.total_s() < best->cost.total_s()) best = &p;
  }
  GRIDNN_REQUIRE(too_large.empty() || best, "--grid auto: no grid of ", procs, " processes fits --memory-limit ",
                 format_bytes(o.memory_limit), " (predicted peaks per rank: ", too_large,
                 "); use more processes, a smaller batch or input, or a larger limit");
  GRIDNN_REQUIRE(best, "--grid auto: no grid of ", procs, " processes fits --batch ", o.batch, " and depth ",
                 o.input[0], "; give --grid PrxPc or change the batch");
  if (!too_large.empty()) considered += " (over --memory-limit: " + too_large + ")";
  char text[768], batch_only[64] = "not usable", where[160] = "";
  if (plans.front().cost.grid.rows == 1)
    std::snprintf(batch_only, sizeof batch_only, "%.3g ms", 1e3 * plans.front().cost.comm_s());
  std::string order_text;  // on one node the order changes nothing
  if (nodes > 1) {
    order_text = std::string(" --rank-order ") + enum_name(best->order);
    std::snprintf(where, sizeof where, " on %d nodes x %d ranks (crossing nodes: %s)", nodes, ranks_per_node,
                  best->crosses.str().c_str());
  }
  std::snprintf(text, sizeof text, "%dx%d%s of %s%s: predicted communication %.3g ms per step; pure batch (1x%d) %s",
                best->cost.grid.rows, best->cost.grid.cols, order_text.c_str(), considered.c_str(), where,
                1e3 * best->cost.comm_s(), procs, batch_only);
  return {{1, best->cost.grid.rows, best->cost.grid.cols}, best->order, text};
}

}  // namespace gridnn::train
