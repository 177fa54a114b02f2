// Two-level machines for the α–β model (cost_model.h): N nodes of G ranks each, one α and β
// between the ranks of a node and another between nodes, and the two orders that lay a
// Pr x Pc grid on the world ranks. gridnn-plan --nodes sweeps every grid in both orders.
//
// The rule, stated once: the launcher places world ranks in blocks, node(w) = w / G. A
// communicator whose ranks all lie on one node runs at the intra-node α and β; one that spans
// nodes runs at the inter-node α and β for all of its traffic — its slowest link bounds every
// step of the collective (no hierarchical refinement: an intra-node phase followed by an
// inter-node one is not modelled). A kind of communicator (row, col, world) crosses nodes
// when any of its groups does: every group runs the same collectives at the same time and the
// step waits for the slowest. A group of one rank moves nothing and crosses nothing.
//
// Which group carries what (cost_model.h): row (the Pr ranks of batch shard c) the model- and
// domain-split traffic of every layer, halos included; col (the Pc ranks of row block r) the
// all-reduces of the 1.5D weight blocks, once per step; world (all P ranks, a real run's
// "stage") the weight all-reduces of batch- and domain-parallel layers and the batch-norm sums.
// A real run's calls (estimate_ranks) name their communicator themselves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/process_grid.h"
#include "plan/cost_model.h"

namespace gridnn::plan {

// Where grid position (r, c) runs: the process grid's rule (parallel/process_grid.h,
// gridnn-train --rank-order), rows-in-node w = c·Pr + r or cols-in-node w = r·Pc + c.
using parallel::RankOrder;
int world_rank(Grid g, RankOrder order, int r, int c);

struct NodeCluster {
  int nodes = 1;           // N
  int ranks_per_node = 1;  // G
  Link intra, inter;
  int procs() const { return nodes * ranks_per_node; }
};
// A gridnn::Error that names the flag to change: N or G below 1, α negative, β not positive
// and finite.
void check_cluster(const NodeCluster& c);

// Which communicators of `g` laid on `c` in `order` span nodes (g.procs() must be c.procs()).
struct Crossing {
  bool row = false, col = false, world = false;
  std::string str() const;  // "row+col+world", ..., "none"
};
Crossing crossing(const NodeCluster& c, Grid g, RankOrder order);
// Each communicator's α and β: the inter-node link where it crosses, the intra-node one else.
Links links_of(const NodeCluster& c, Grid g, RankOrder order);

// One grid in one rank order on a cluster.
struct NodePlan {
  RankOrder order = RankOrder::rows_in_node;
  Crossing crosses;
  PlanCost cost;
};
// Every factorization Pr x Pc of the cluster's N·G ranks (Pr ascending), each in both orders
// (rows-in-node first): estimate() with the links of its layout; compute from `m`.
std::vector<NodePlan> sweep(const Network& net, int64_t batch, const NodeCluster& c, const Machine& m,
                            const Strategy& s);
// The index of the fastest (total time; ties: the first).
size_t best_index(const std::vector<NodePlan>& plans);

}  // namespace gridnn::plan
