// --grid auto (grid_choice.h).
#include "models/run/grid_choice.h"

#include <cstdio>

#include "core/bytes.h"
#include "core/error.h"
#include "models/run/memory_plan.h"
#include "models/run/step_plan.h"

namespace gridnn::run {

plan::NodeCluster assumed_cluster(int nodes, int ranks_per_node) {
  plan::NodeCluster c;
  c.nodes = nodes;
  c.ranks_per_node = ranks_per_node;
  c.intra = {2e-6, 4.0 / 10e9};
  c.inter = {2e-6, 4.0 / 6e9};
  return c;
}

GridChoice choose_grid(const RunOptions& o, int nodes, int ranks_per_node, std::optional<parallel::RankOrder> order) {
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

}  // namespace gridnn::run
