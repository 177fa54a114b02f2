// Two-level machines (plan/node_layout.h): where the grid's communicators run for nodes of G
// ranks in both rank orders, each term at the link its communicator crosses, and the sweep
// over grids and orders. Expected times are plain arithmetic here: α⌈log2 p⌉ + β(p−1)/p·n for
// an all-gather, twice that for an all-reduce.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/node_layout.h"

namespace gridnn::plan {
namespace {

const Machine kPaper{2e-6, 4.0 / 6e9, 0};
const Link kNvlink{3e-6, 4.0 / 150e9};  // inside a node
const Link kIb{5e-6, 4.0 / 25e9};       // between nodes: 200 Gb/s

double gather_s(const Link& l, double n, int p) {
  return p > 1 ? l.alpha * std::ceil(std::log2(p)) + l.beta * (p - 1.0) / p * n : 0;
}
double reduce_s(const Link& l, double n, int p) { return 2 * gather_s(l, n, p); }

NodeCluster cluster(int nodes, int ranks_per_node, Link intra = kNvlink, Link inter = kIb) {
  return {nodes, ranks_per_node, intra, inter};
}

const NodePlan& plan_of(const std::vector<NodePlan>& plans, int rows, RankOrder order) {
  for (const NodePlan& p : plans)
    if (p.cost.grid.rows == rows && p.order == order) return p;
  throw std::runtime_error("no plan with " + std::to_string(rows) + " rows");
}

// A small 3D network that uses every kind of term: halos, an attention gather, batch-norm
// sums, a global pool, then two fully connected layers.
Network small_3d() {
  Network net{"small", {}};
  LayerShape conv;
  conv.name = "conv";
  conv.in_channels = 4;
  conv.out_channels = 8;
  conv.in_size = conv.out_size = {16, 16, 16};
  conv.kernel = 3;
  conv.padding = 1;
  conv.weights = 8 * 4 * 27;
  conv.input_gradient = false;
  LayerShape bn = conv;
  bn.name = "bn";
  bn.kind = LayerKind::bn;
  bn.in_channels = 8;
  bn.kernel = 1;
  bn.padding = 0;
  bn.weights = 16;
  bn.input_gradient = true;
  LayerShape att = bn;
  att.name = "att";
  att.kind = LayerKind::attention;
  att.weights = 3 * 8 * 8;
  LayerShape pool = bn;
  pool.name = "pool";
  pool.kind = LayerKind::global_pool;
  pool.out_size = {1, 1, 1};
  pool.weights = 0;
  net.layers = {conv, bn, att, pool, fc_layer("fc1", 8, 64), fc_layer("fc2", 64, 10)};
  return net;
}

TEST(TwoLevel, WorldRanksFollowTheRankOrder) {
  const Grid g{2, 3};
  EXPECT_EQ(world_rank(g, RankOrder::rows_in_node, 1, 0), 1);  // c·Pr + r
  EXPECT_EQ(world_rank(g, RankOrder::rows_in_node, 1, 2), 5);
  EXPECT_EQ(world_rank(g, RankOrder::rows_in_node, 0, 2), 4);
  EXPECT_EQ(world_rank(g, RankOrder::cols_in_node, 1, 0), 3);  // r·Pc + c
  EXPECT_EQ(world_rank(g, RankOrder::cols_in_node, 0, 2), 2);
  EXPECT_EQ(world_rank(g, RankOrder::cols_in_node, 1, 2), 5);
  EXPECT_STREQ(enum_name(RankOrder::rows_in_node), "rows-in-node");
  EXPECT_STREQ(enum_name(RankOrder::cols_in_node), "cols-in-node");
}

// The flat model is the two-level one with one link everywhere, to the last bit.
TEST(TwoLevel, FlatLinksGiveTheOldEstimate) {
  struct Case {
    Network net;
    int64_t batch;
    Strategy s;
  };
  const Case cases[] = {{alexnet(), 2048, model_batch()},
                        {alexnet(), 2048, model_batch_domain()},
                        {small_3d(), 16, model_batch_domain()},
                        {small_3d(), 16, pure_batch()}};
  for (const Case& c : cases)
    for (const Grid g : {Grid{1, 8}, Grid{2, 4}, Grid{4, 2}, Grid{8, 1}}) {
      const PlanCost old = estimate(c.net, c.batch, g, kPaper, c.s);
      const PlanCost two = estimate(c.net, c.batch, g, kPaper, c.s, Links::flat(kPaper));
      EXPECT_EQ(two.comm_s(), old.comm_s()) << c.net.name << " " << g.rows << "x" << g.cols;
      EXPECT_EQ(two.words, old.words);
      EXPECT_EQ(two.latency_s, old.latency_s);
      EXPECT_EQ(two.bandwidth_s, old.bandwidth_s);
      ASSERT_EQ(two.layers.size(), old.layers.size());
      for (size_t i = 0; i < old.layers.size(); ++i) EXPECT_EQ(two.layers[i].comm_s(), old.layers[i].comm_s());
    }
}

// Each term runs on its communicator: with α of 1 s on row, 100 s on col and 10⁴ s on world
// (β = 0) a term's latency over its messages names its link.
TEST(TwoLevel, EachTermRunsOnItsCommunicator) {
  const Links links{{1, 0}, {100, 0}, {1e4, 0}};
  size_t row = 0, col = 0, world = 0;
  for (const Network& net : {alexnet(), small_3d()})
    for (const Strategy& s : {model_batch(), model_batch_domain()}) {
      const PlanCost p = estimate(net, 16, Grid{2, 4}, kPaper, s, links);
      for (const LayerCost& l : p.layers)
        for (const CommTerm& t : l.terms) {
          ASSERT_GT(t.messages, 0) << t.what;
          const double alpha = t.latency_s / t.messages;
          EXPECT_DOUBLE_EQ(t.bandwidth_s, 0);
          const std::string& w = t.what;
          if (w.find("over Pr") != std::string::npos) {
            EXPECT_EQ(alpha, 1) << w;
            ++row;
          } else if (w.find("over Pc") != std::string::npos) {
            EXPECT_EQ(alpha, 100) << w;
            ++col;
          } else {
            EXPECT_NE(w.find("over P"), std::string::npos) << w;
            EXPECT_EQ(alpha, 1e4) << w;
            ++world;
          }
        }
    }
  EXPECT_GT(row, 0u);
  EXPECT_GT(col, 0u);
  EXPECT_GT(world, 0u);
}

// Two FC layers (the first on the data) on 2 x 2, B = 8, with nodes of 2 ranks: rows-in-node
// keeps the row groups {0, 1}, {2, 3} inside a node and the columns {0, 2}, {1, 3} across;
// cols-in-node the other way round.
TEST(TwoLevel, TwoFcLayersOnTwoNodesByHand) {
  LayerShape fc1 = fc_layer("fc1", 1024, 512);
  fc1.input_gradient = false;
  const Network net{"fc", {fc1, fc_layer("fc2", 512, 10)}};
  const Link intra{1e-6, 1e-11}, inter{1e-5, 1e-9};
  const NodeCluster two = cluster(2, 2, intra, inter);
  const Grid g{2, 2};
  // B/Pc = 4 samples: Y of fc1 gathered (4·512), fc2's dX all-reduced (4·512) and its Y
  // gathered (4·10), over Pr = 2; the weight blocks |W|/Pr all-reduced over Pc = 2.
  auto row_s = [](const Link& l) { return gather_s(l, 2048, 2) + reduce_s(l, 2048, 2) + gather_s(l, 40, 2); };
  auto col_s = [](const Link& l) { return reduce_s(l, (1024 * 512 + 512) / 2.0, 2) + reduce_s(l, 5130 / 2.0, 2); };
  const PlanCost rows = estimate(net, 8, g, kPaper, model_batch(), links_of(two, g, RankOrder::rows_in_node));
  const PlanCost cols = estimate(net, 8, g, kPaper, model_batch(), links_of(two, g, RankOrder::cols_in_node));
  EXPECT_NEAR(rows.comm_s(), row_s(intra) + col_s(inter), 1e-15);
  EXPECT_NEAR(cols.comm_s(), row_s(inter) + col_s(intra), 1e-15);
  EXPECT_LT(cols.comm_s(), rows.comm_s());  // the weight blocks are the heavy traffic here
  const std::vector<NodePlan> plans = sweep(net, 8, two, kPaper, model_batch());
  ASSERT_EQ(plans.size(), 6u);  // 1x4, 2x2, 4x1 in both orders
  EXPECT_NEAR(plan_of(plans, 2, RankOrder::cols_in_node).cost.comm_s(), cols.comm_s(), 1e-15);
}

// Pure batch (1 x 32) moves only weights, over col and world, and both span the 8 nodes: each
// weighted layer costs 2(α⌈log2 32⌉ + β·31/32·W) at the inter-node link; on one node of 32
// ranks at the intra-node link.
TEST(TwoLevel, PureBatchAlexNetRunsAtTheInterNodeLink) {
  const Network net = alexnet();
  for (const NodeCluster& cl : {cluster(8, 4), cluster(1, 32)}) {
    const Link& link = cl.nodes > 1 ? cl.inter : cl.intra;
    double expected = 0;
    for (const LayerShape& l : net.layers)
      if (l.weights) expected += reduce_s(link, double(l.weights), 32);
    const PlanCost p =
        estimate(net, 2048, Grid{1, 32}, kPaper, model_batch(), links_of(cl, Grid{1, 32}, RankOrder::rows_in_node));
    EXPECT_NEAR(p.comm_s(), expected, 1e-12 * expected) << cl.nodes << " nodes";
  }
}

TEST(TwoLevel, WhichCommunicatorsCrossNodes) {
  using O = RankOrder;
  struct Case {
    int nodes, g, rows, cols;
    O order;
    const char* crosses;
  };
  const Case cases[] = {
      {8, 4, 4, 8, O::rows_in_node, "col+world"},      // rows: 4 consecutive ranks, one node
      {8, 4, 4, 8, O::cols_in_node, "row+col+world"},  // columns of 8 ranks span 2 nodes
      {8, 4, 8, 4, O::rows_in_node, "row+col+world"},  // Pr = 8 > G
      {8, 4, 8, 4, O::cols_in_node, "row+world"},      // columns: 4 consecutive ranks
      {8, 4, 2, 16, O::rows_in_node, "col+world"},     // {2c, 2c+1}
      {8, 4, 2, 16, O::cols_in_node, "row+col+world"},
      {8, 4, 1, 32, O::rows_in_node, "col+world"},  // a row of one rank crosses nothing
      {8, 4, 1, 32, O::cols_in_node, "col+world"},
      {8, 4, 32, 1, O::cols_in_node, "row+world"},
      {2, 4, 8, 1, O::rows_in_node, "row+world"},      // Pr > G, Pc = 1
      {2, 6, 3, 4, O::cols_in_node, "row+col+world"},  // Pc = 4 does not divide 6: {4..7}
      {2, 6, 3, 4, O::rows_in_node, "col+world"},      // rows {3c..3c+2}: 3 divides 6
      {2, 6, 4, 3, O::cols_in_node, "row+world"},      // columns {3r..3r+2}
      {2, 6, 2, 6, O::cols_in_node, "row+world"},
      {3, 4, 3, 4, O::rows_in_node, "row+col+world"},  // Pr = 3 does not divide 4: {3, 4, 5}
      {1, 8, 2, 4, O::rows_in_node, "none"},           // one node: nothing crosses
      {1, 8, 4, 2, O::cols_in_node, "none"},
      {2, 1, 2, 1, O::rows_in_node, "row+world"},  // a rank per node
  };
  for (const Case& c : cases) {
    const Crossing x = crossing(cluster(c.nodes, c.g), Grid{c.rows, c.cols}, c.order);
    EXPECT_EQ(x.str(), c.crosses) << c.nodes << " nodes x " << c.g << ", " << c.rows << "x" << c.cols << " "
                                  << enum_name(c.order);
  }
  // The links follow the crossing.
  const Links l = links_of(cluster(8, 4), Grid{8, 4}, O::cols_in_node);
  EXPECT_EQ(l.row.beta, kIb.beta);
  EXPECT_EQ(l.col.beta, kNvlink.beta);
  EXPECT_EQ(l.col.alpha, kNvlink.alpha);
  EXPECT_EQ(l.world.alpha, kIb.alpha);
  EXPECT_THROW(crossing(cluster(8, 4), Grid{4, 4}, O::rows_in_node), std::invalid_argument);
}

// One link inside and between nodes: every grid in either order costs what the flat model
// says, and the choice is the flat one (AlexNet at P = 32: 8 x 4), in the first order.
TEST(TwoLevel, EqualLinksGiveTheFlatPlan) {
  const Link paper{kPaper.alpha, kPaper.beta};
  const Network net = alexnet();
  const std::vector<PlanCost> flat = sweep(net, 2048, 32, kPaper, model_batch());
  for (const NodeCluster& cl :
       {cluster(8, 4, paper, paper), cluster(4, 8, paper, paper), cluster(32, 1, paper, paper)}) {
    const std::vector<NodePlan> plans = sweep(net, 2048, cl, kPaper, model_batch());
    ASSERT_EQ(plans.size(), 2 * flat.size());
    for (size_t i = 0; i < plans.size(); ++i) {
      const PlanCost& f = flat[i / 2];
      EXPECT_EQ(plans[i].cost.grid.rows, f.grid.rows);
      EXPECT_EQ(plans[i].cost.total_s(), f.total_s()) << f.grid.rows << "x" << f.grid.cols;
    }
    const NodePlan& best = plans[best_index(plans)];
    EXPECT_EQ(best.cost.grid.rows, 8);
    EXPECT_EQ(best.cost.grid.cols, 4);
    EXPECT_EQ(best.order, RankOrder::rows_in_node);
  }
}

// The words of the terms of `p` over `comm` ("over Pr", "over Pc").
double words_over(const PlanCost& p, const std::string& comm) {
  double w = 0;
  for (const LayerCost& l : p.layers)
    for (const CommTerm& t : l.terms)
      if (t.what.find(comm) != std::string::npos) w += t.words;
  return w;
}

// AlexNet, B = 2048, NVLink in a node and 200 Gb/s between: the flat model at the inter-node
// link picks 8 x 4 (its order does not matter there).
//   8 nodes of 4: a row of 8 ranks cannot share a node, a column of 4 can. cols-in-node keeps
//     the 1.5D weight blocks (over Pc) inside the nodes; rows-in-node sends everything across,
//     and 4 x 8 rows-in-node (rows inside) sends blocks of columns of 8 across: both slower.
//   4 nodes of 8: the choice moves to 4 x 8 cols-in-node. There the weight blocks over Pc are
//     the heavy traffic (more words than the activations over Pr), and a column of 8 fits a
//     node; 8 x 4 rows-in-node (rows inside, the columns across) is slower.
TEST(TwoLevel, ASlowInterNodeLinkKeepsTheHeavyCommunicatorInANode) {
  const Network net = alexnet();
  Machine at_inter = kPaper;
  at_inter.alpha = kIb.alpha;
  at_inter.beta = kIb.beta;
  const std::vector<PlanCost> flat = sweep(net, 2048, 32, at_inter, model_batch());
  EXPECT_EQ(flat[best_index(flat)].grid.rows, 8);

  const std::vector<NodePlan> by4 = sweep(net, 2048, cluster(8, 4), kPaper, model_batch());
  const NodePlan& best4 = by4[best_index(by4)];
  EXPECT_EQ(best4.cost.grid.rows, 8);
  EXPECT_EQ(best4.order, RankOrder::cols_in_node);
  EXPECT_EQ(best4.crosses.str(), "row+world");
  EXPECT_LT(best4.cost.total_s(), plan_of(by4, 8, RankOrder::rows_in_node).cost.total_s());
  EXPECT_LT(best4.cost.total_s(), plan_of(by4, 4, RankOrder::rows_in_node).cost.total_s());

  const std::vector<NodePlan> by8 = sweep(net, 2048, cluster(4, 8), kPaper, model_batch());
  const NodePlan& best8 = by8[best_index(by8)];
  EXPECT_EQ(best8.cost.grid.rows, 4);
  EXPECT_EQ(best8.order, RankOrder::cols_in_node);
  EXPECT_EQ(best8.crosses.str(), "row+world");
  EXPECT_GT(words_over(best8.cost, "over Pc"), words_over(best8.cost, "over Pr"));
  EXPECT_LT(best8.cost.total_s(), plan_of(by8, 8, RankOrder::rows_in_node).cost.total_s());

  // With one link everywhere the order no longer matters: the first of the ties is kept.
  const std::vector<NodePlan> same = sweep(net, 2048, cluster(8, 4, kIb, kIb), kPaper, model_batch());
  EXPECT_EQ(same[best_index(same)].order, RankOrder::rows_in_node);
  EXPECT_EQ(same[best_index(same)].cost.grid.rows, 8);
}

// A real run's calls: "row" and "col" at their links, "stage" at world's.
TEST(TwoLevel, EstimateRanksUsesEachCallsCommunicator) {
  std::vector<RankStep> ranks(4);
  for (RankStep& r : ranks)
    r.calls = {make_call("conv (gather)", "row", "all_gatherv", 10, 2, 100),
               make_call("fc", "col", "all_reduce", 60, 2), make_call("gradients", "stage", "all_reduce", 50, 4)};
  ranks[0].layers = ranks[1].layers = ranks[2].layers =
      ranks[3].layers = {fc_layer("conv", 1, 1), fc_layer("fc", 1, 1)};
  const Link row{1e-6, 1e-9}, col{2e-6, 3e-9}, world{5e-6, 7e-9};
  const PlanCost p = estimate_ranks(ranks, Grid{2, 2}, kPaper, Links{row, col, world});
  const double expected = (row.alpha * 1 + row.beta * 100) + (col.alpha * 2 + col.beta * 60) +
                          (world.alpha * 4 + world.beta * 2 * 0.75 * 50);
  EXPECT_NEAR(p.comm_s(), expected, 1e-18);
  EXPECT_EQ(estimate_ranks(ranks, Grid{2, 2}, kPaper).comm_s(),
            estimate_ranks(ranks, Grid{2, 2}, kPaper, Links::flat(kPaper)).comm_s());
}

TEST(TwoLevel, BadClustersSayWhatToChange) {
  auto message = [](const NodeCluster& c) {
    try {
      check_cluster(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(cluster(0, 4)).find("--nodes"), std::string::npos);
  EXPECT_NE(message(cluster(-2, 4)).find("--nodes"), std::string::npos);
  EXPECT_NE(message(cluster(2, 0)).find("--ranks-per-node"), std::string::npos);
  EXPECT_NE(message(cluster(2, 4, {-1, kNvlink.beta})).find("--alpha-intra"), std::string::npos);
  EXPECT_NE(message(cluster(2, 4, kNvlink, {-1, kIb.beta})).find("--alpha-inter"), std::string::npos);
  EXPECT_NE(message(cluster(2, 4, {0, 0})).find("--bandwidth-intra"), std::string::npos);
  EXPECT_NE(message(cluster(2, 4, kNvlink, {0, -1})).find("--bandwidth-inter"), std::string::npos);
  EXPECT_NE(message(cluster(2, 4, kNvlink, {0, INFINITY})).find("--bandwidth-inter"), std::string::npos);
  EXPECT_EQ(message(cluster(2, 4, {0, kNvlink.beta})),
            "no error");  // α = 0 is a valid idealization
  EXPECT_THROW(sweep(alexnet(), 2048, cluster(0, 4), kPaper, model_batch()), Error);
}

}  // namespace
}  // namespace gridnn::plan
