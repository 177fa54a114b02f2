// Two-level machines: where the grid's communicators run, and the sweep over grids and rank
// orders (the rule in node_layout.h).
#include "plan/node_layout.h"

#include <cmath>
#include <stdexcept>

#include "core/error.h"

namespace gridnn::plan {

int world_rank(Grid g, RankOrder order, int r, int c) {
  return parallel::ProcessGrid::world_rank_of({1, g.rows, g.cols}, 0, r, c, order);
}

void check_cluster(const NodeCluster& c) {
  GRIDNN_REQUIRE(c.nodes >= 1, "the number of nodes must be >= 1, got ", c.nodes, ": change --nodes");
  GRIDNN_REQUIRE(c.ranks_per_node >= 1, "the ranks per node must be >= 1, got ", c.ranks_per_node,
                 ": change --ranks-per-node");
  GRIDNN_REQUIRE(c.intra.alpha >= 0, "the latency inside a node must be >= 0 s, got ", c.intra.alpha,
                 ": change --alpha-intra");
  GRIDNN_REQUIRE(c.inter.alpha >= 0, "the latency between nodes must be >= 0 s, got ", c.inter.alpha,
                 ": change --alpha-inter");
  GRIDNN_REQUIRE(std::isfinite(c.intra.beta) && c.intra.beta > 0,
                 "the time per word inside a node must be > 0 and finite, got ", c.intra.beta,
                 " s: change --bandwidth-intra to a positive bytes/s");
  GRIDNN_REQUIRE(std::isfinite(c.inter.beta) && c.inter.beta > 0,
                 "the time per word between nodes must be > 0 and finite, got ", c.inter.beta,
                 " s: change --bandwidth-inter to a positive bytes/s");
}

std::string Crossing::str() const {
  std::string s;
  for (auto [crosses, name] : {std::pair{row, "row"}, {col, "col"}, {world, "world"}})
    if (crosses) s += (s.empty() ? "" : "+") + std::string(name);
  return s.empty() ? "none" : s;
}

Crossing crossing(const NodeCluster& cl, Grid g, RankOrder order) {
  if (g.procs() != cl.procs())
    throw std::invalid_argument("crossing: the grid has " + std::to_string(g.procs()) + " ranks, the cluster " +
                                std::to_string(cl.procs()));
  auto node = [&](int r, int c) { return world_rank(g, order, r, c) / cl.ranks_per_node; };
  Crossing x;
  for (int c = 0; c < g.cols; ++c)  // row group c: (0..Pr-1, c)
    for (int r = 1; r < g.rows; ++r) x.row = x.row || node(r, c) != node(0, c);
  for (int r = 0; r < g.rows; ++r)  // column group r: (r, 0..Pc-1)
    for (int c = 1; c < g.cols; ++c) x.col = x.col || node(r, c) != node(r, 0);
  x.world = cl.nodes > 1;
  return x;
}

Links links_of(const NodeCluster& cl, Grid g, RankOrder order) {
  const Crossing x = crossing(cl, g, order);
  auto link = [&cl](bool crosses) { return crosses ? cl.inter : cl.intra; };
  return {link(x.row), link(x.col), link(x.world)};
}

std::vector<NodePlan> sweep(const Network& net, int64_t batch, const NodeCluster& cl, const Machine& m,
                            const Strategy& s) {
  check_cluster(cl);
  const int P = cl.procs();
  std::vector<NodePlan> plans;
  for (int r = 1; r <= P; ++r) {
    if (P % r != 0) continue;
    const Grid g{r, P / r};
    for (RankOrder order : {RankOrder::rows_in_node, RankOrder::cols_in_node})
      plans.push_back({order, crossing(cl, g, order), estimate(net, batch, g, m, s, links_of(cl, g, order))});
  }
  return plans;
}

size_t best_index(const std::vector<NodePlan>& plans) {
  size_t best = 0;
  for (size_t i = 1; i < plans.size(); ++i)
    if (plans[i].cost.total_s() < plans[best].cost.total_s()) best = i;
  return best;
}

}  // namespace gridnn::plan
