// --grid auto: the grid (and rank order) the cost model estimates fastest for a job's
// nodes, among those the run can use and, with --memory-limit, fit (docs/design.md §6, §6a).
#pragma once

#include <optional>
#include <string>

#include "models/run/run_options.h"
#include "parallel/process_grid.h"
#include "plan/node_layout.h"

namespace gridnn::run {

// The machine --grid auto assumes, having measured nothing: `nodes` nodes of `ranks_per_node`
// ranks; inside a node shared memory (α 2 µs, 10 GB/s), between nodes the flat model's
// network (α 2 µs, 6 GB/s).
plan::NodeCluster assumed_cluster(int nodes, int ranks_per_node);

// --grid auto: the grid (and, where `order` is not given, the rank order) whose step is
// estimated fastest on assumed_cluster(nodes, ranks_per_node), among those the run can use
// and, with --memory-limit, fit; compute is left out (it is the same on every grid). On one
// node the order changes nothing and is `order` or rows-in-node. `why`: a one-line account
// ("2x2 of 1x4, 2x2, 4x1: predicted communication 1.2 ms per step; pure batch (1x4) 2.3 ms";
// on several nodes the choice's --rank-order, each candidate with its order, and which
// communicators of the choice cross nodes).
struct GridChoice {
  parallel::GridShape shape;
  parallel::RankOrder order = parallel::RankOrder::rows_in_node;
  std::string why;
};
GridChoice choose_grid(const RunOptions& options, int nodes, int ranks_per_node,
                       std::optional<parallel::RankOrder> order);

}  // namespace gridnn::run
