// Single-process parts of the process grid and the communicators (label unit, no MPI):
// GridShape::parse, balanced_range, the self communicator, CommLog and CommLayerScope, and
// the NCCL loopback environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/nccl_loopback.h"
#include "parallel/process_grid.h"
#include "test/support/error_message.h"

namespace gridnn::parallel {
namespace {

using test::error_message;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(GridShape, ParsesRowsByColsAndStages) {
  GridShape g = GridShape::parse("2x4");
  EXPECT_EQ(g.stages, 1);
  EXPECT_EQ(g.rows, 2);
  EXPECT_EQ(g.cols, 4);
  EXPECT_EQ(g.size(), 8);
  EXPECT_EQ(g.str(), "2x4");
  GridShape h = GridShape::parse("3x2x5");
  EXPECT_EQ(h.stages, 3);
  EXPECT_EQ(h.rows, 2);
  EXPECT_EQ(h.cols, 5);
  EXPECT_EQ(h.size(), 30);
  EXPECT_EQ(h.str(), "3x2x5");
  EXPECT_EQ(GridShape::parse("1x1x1").str(), "1x1");  // one stage reads as PrxPc
  EXPECT_EQ(GridShape::parse("12x1").rows, 12);
}

TEST(GridShape, RejectsMalformedTextSayingTheFormat) {
  for (const char* bad :
       {"", "2", "2x", "x2", "0x2", "2x0", "a", "2x2x2x2", "2 x2", "-1x2", "2X2", "2x2 ", "1x0x1", "99999999x1"}) {
    std::string m = error_message([&] { GridShape::parse(bad); });
    EXPECT_TRUE(contains(m, "PrxPc or PsxPrxPc")) << "\"" << bad << "\": " << m;
    EXPECT_TRUE(contains(m, std::string("\"") + bad + "\"")) << m;
  }
}

TEST(BalancedRange, FirstPartsTakeTheRemainder) {
  std::vector<std::pair<int64_t, int64_t>> got;
  for (int i = 0; i < 3; ++i) got.emplace_back(balanced_range(10, 3, i).begin, balanced_range(10, 3, i).end);
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 7}, {7, 10}}));
  EXPECT_EQ(balanced_range(2, 4, 0).size(), 1);
  EXPECT_EQ(balanced_range(2, 4, 1).size(), 1);
  EXPECT_EQ(balanced_range(2, 4, 2).size(), 0);
  EXPECT_EQ(balanced_range(2, 4, 3).begin, 2);
  EXPECT_EQ(balanced_range(0, 1, 0).size(), 0);
}

TEST(BalancedRange, PartsTileTheRangeAndDifferByAtMostOne) {
  for (int64_t n = 0; n < 40; ++n)
    for (int parts = 1; parts <= 9; ++parts) {
      int64_t next = 0, lo = n, hi = 0;
      for (int i = 0; i < parts; ++i) {
        Range r = balanced_range(n, parts, i);
        EXPECT_EQ(r.begin, next) << n << " " << parts << " " << i;
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1);
    }
}

TEST(BalancedRange, RejectsPartsOutsideTheSplit) {
  EXPECT_TRUE(contains(error_message([] { balanced_range(10, 3, 3); }), "part 3 of 3"));
  EXPECT_TRUE(contains(error_message([] { balanced_range(10, 0, 0); }), "balanced_range"));
}

TEST(ProcessGrid, SingleIsOneProcessWithNamedSelfCommunicators) {
  auto g = ProcessGrid::single();
  EXPECT_EQ(g->shape().size(), 1);
  EXPECT_EQ(g->world_rank(), 0);
  EXPECT_EQ(g->row().size(), 1);
  EXPECT_EQ(g->col().size(), 1);
  EXPECT_EQ(g->stage_comm().size(), 1);
  EXPECT_EQ(g->world().size(), 1);
  EXPECT_EQ(g->row().name(), "row");
  EXPECT_EQ(g->col().name(), "col");
  EXPECT_EQ(g->stage_comm().name(), "stage");
  EXPECT_EQ(g->world().name(), "world");
}

TEST(ProcessGrid, WithoutMpiRunningOnlyTheOneByOneGridExists) {
  auto g = ProcessGrid::create(GridShape::parse("1x1"));
  EXPECT_EQ(g->world().size(), 1);
  std::string m = error_message([] { ProcessGrid::create(GridShape::parse("2x2")); });
  EXPECT_TRUE(contains(m, "--grid 2x2 needs 4 processes")) << m;
}

TEST(ProcessGrid, RankMapping) {
  GridShape s = GridShape::parse("2x3x4");  // Ps 2, Pr 3, Pc 4
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 0, 0, 0), 0);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 0, 1, 0), 1);  // rows consecutive
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 0, 0, 1), 3);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 1, 0, 0), 12);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 1, 2, 3), 23);
  // cols-in-node: w = (s * Pr + r) * Pc + c, columns consecutive.
  const RankOrder cols = RankOrder::cols_in_node;
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 0, 0, 1, cols), 1);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 0, 1, 0, cols), 4);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 1, 0, 0, cols), 12);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 1, 2, 3, cols), 23);
  EXPECT_EQ(ProcessGrid::world_rank_of(s, 1, 1, 2, cols), 18);
  // Every position gets its own rank in both orders.
  for (RankOrder order : {RankOrder::rows_in_node, cols}) {
    std::vector<int> seen(24, 0);
    for (int st = 0; st < 2; ++st)
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 4; ++c) ++seen[size_t(ProcessGrid::world_rank_of(s, st, r, c, order))];
    for (int n : seen) EXPECT_EQ(n, 1);
  }
}

// world_rank_of and position_of are inverses, for several shapes and both orders, and a
// planned grid's stage communicator ranks its members as a running grid's does.
TEST(ProcessGrid, RankMappingInvertsInBothOrders) {
  for (const char* text : {"1x1", "2x3", "3x2", "1x5", "4x1", "2x3x4", "3x1x2", "2x2x2"}) {
    const GridShape shape = GridShape::parse(text);
    for (RankOrder order : {RankOrder::rows_in_node, RankOrder::cols_in_node}) {
      SCOPED_TRACE(std::string(text) + " " + enum_name(order));
      for (int w = 0; w < shape.size(); ++w) {
        const GridPosition p = ProcessGrid::position_of(shape, w, order);
        EXPECT_EQ(ProcessGrid::world_rank_of(shape, p.stage, p.row, p.col, order), w);
      }
      for (int st = 0; st < shape.stages; ++st)
        for (int r = 0; r < shape.rows; ++r)
          for (int c = 0; c < shape.cols; ++c) {
            const GridPosition p =
                ProcessGrid::position_of(shape, ProcessGrid::world_rank_of(shape, st, r, c, order), order);
            EXPECT_EQ(p.stage, st);
            EXPECT_EQ(p.row, r);
            EXPECT_EQ(p.col, c);
            auto planned = ProcessGrid::planned(shape, st, r, c, order);
            EXPECT_EQ(planned->stage_comm().rank(), planned->world_rank() % (shape.rows * shape.cols));
          }
    }
  }
  const std::string m = error_message([] { ProcessGrid::position_of(GridShape::parse("2x2"), 4); });
  EXPECT_TRUE(contains(m, "world rank 4 is outside [0, 4)")) << m;
}

TEST(ProcessGrid, RankOrderNamesAndPlacement) {
  EXPECT_EQ(parse_enum<RankOrder>("rows-in-node"), RankOrder::rows_in_node);
  EXPECT_EQ(parse_enum<RankOrder>("cols-in-node"), RankOrder::cols_in_node);
  EXPECT_STREQ(enum_name(RankOrder::cols_in_node), "cols-in-node");
  const std::string bad = error_message([] { parse_enum<RankOrder>("rows"); });
  EXPECT_TRUE(contains(bad, "unknown rank order \"rows\"; use rows-in-node")) << bad;

  // 2x2 on two nodes of two ranks: rows-in-node keeps rows (0,1) and (2,3) together.
  const GridShape g = GridShape::parse("2x2");
  auto rows = ProcessGrid::planned(g, 0, 0, 0, RankOrder::rows_in_node);
  std::string t = rows->describe_placement({0, 0, 1, 1});
  EXPECT_TRUE(contains(t,
                       "row groups (model/domain traffic, every layer) inside a node; column groups "
                       "(gradient all-reduce, once per step) cross nodes"))
      << t;
  EXPECT_TRUE(contains(t, "node 0: 0=(0,0) 1=(1,0)\n  node 1: 2=(0,1) 3=(1,1)")) << t;
  auto cols = ProcessGrid::planned(g, 0, 1, 0, RankOrder::cols_in_node);
  EXPECT_EQ(cols->world_rank(), 2);
  t = cols->describe_placement({0, 0, 1, 1});
  EXPECT_TRUE(contains(t,
                       "row groups (model/domain traffic, every layer) CROSS nodes; column groups "
                       "(gradient all-reduce, once per step) inside a node"))
      << t;
  EXPECT_TRUE(contains(t, "node 0: 0=(0,0) 1=(0,1)\n  node 1: 2=(1,0) 3=(1,1)")) << t;
  // One node: everything inside.
  t = rows->describe_placement({0, 0, 0, 0});
  EXPECT_TRUE(contains(t, "inside a node; column groups (gradient all-reduce, once per step) inside a node")) << t;
  EXPECT_FALSE(error_message([&] { rows->describe_placement({0, 0}); }).empty());
}

// ---- the self communicator ---------------------------------------------------------------

TEST(SelfCommunicator, CollectivesAreCopies) {
  auto c = make_self_communicator("self");
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  c->all_reduce(t);
  c->all_reduce(t, ReduceOp::max);
  c->broadcast(t, 0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  // Each collective that writes a fresh output copies t into it.
  const std::vector<std::pair<const char*, std::function<void(Tensor&)>>> copies = {
      {"all_gather", [&](Tensor& out) { c->all_gather(t, out); }},
      {"all_gatherv", [&](Tensor& out) { c->all_gatherv(t, out, {2}); }},
      {"reduce_scatter", [&](Tensor& out) { c->reduce_scatter(t, out); }},
      {"reduce_scatterv", [&](Tensor& out) { c->reduce_scatterv(t, out, {2}); }},
      {"send_recv", [&](Tensor& out) { c->send_recv(t, 0, out, 0, 7); }},
  };
  for (const auto& [name, collective] : copies) {
    Tensor out = Tensor::zeros({2, 2});
    collective(out);
    EXPECT_EQ(out.to_vector<float>(), t.to_vector<float>()) << name;
  }
  Tensor none;
  c->send_recv(none, -1, none, -1, 0);
  c->barrier();
  // Gathering a tensor into itself (the usual in-place gather) leaves it as it is.
  c->all_gather(t, t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(SelfCommunicator, ErrorsNameTheCommunicatorAndTheOperation) {
  auto c = make_self_communicator("row");
  Tensor t = Tensor::zeros({2, 3});
  Tensor wrong = Tensor::zeros({3, 3});
  std::string m = error_message([&] { c->all_gather(t, wrong); });
  EXPECT_TRUE(contains(m, "all_gather on communicator \"row\"")) << m;
  EXPECT_TRUE(contains(m, "must have 2 rows")) << m;
  Tensor other_cols = Tensor::zeros({2, 4});
  m = error_message([&] { c->reduce_scatter(t, other_cols); });
  EXPECT_TRUE(contains(m, "reduce_scatter on communicator \"row\"")) << m;
  EXPECT_TRUE(contains(m, "differ in dimension 1")) << m;
  m = error_message([&] { c->broadcast(t, 1); });
  EXPECT_TRUE(contains(m, "broadcast on communicator \"row\"")) << m;
  EXPECT_TRUE(contains(m, "root rank 1 is outside")) << m;
  Tensor h = Tensor::zeros({4}, DType::f16);
  m = error_message([&] { c->all_reduce(h); });
  EXPECT_TRUE(contains(m, "all_reduce on communicator \"row\"")) << m;
  EXPECT_TRUE(contains(m, "cannot reduce f16")) << m;
  Tensor none;
  m = error_message([&] { c->send_recv(t, 0, none, -1, 0); });
  EXPECT_TRUE(contains(m, "send_recv on communicator \"row\"")) << m;
  m = error_message([&] { c->all_gatherv(t, t, {2, 0}); });
  EXPECT_TRUE(contains(m, "one per rank needs 1")) << m;
  m = error_message([&] { c->all_reduce(none); });
  EXPECT_TRUE(contains(m, "undefined tensor")) << m;
}

// ---- counting --------------------------------------------------------------------------------

TEST(CommLog, RecordsEveryCallWithItsLayer) {
  comm_log().clear();
  auto c = make_self_communicator("stage");
  Tensor t = Tensor::zeros({3, 4});
  Tensor out = Tensor::zeros({3, 4});
  {
    CommLayerScope outer("block1");
    c->all_reduce(t);
    {
      CommLayerScope inner("block1.conv");
      EXPECT_EQ(CommLayerScope::current(), "block1.conv");
      c->all_gather(t, out);
      c->broadcast(t, 0);
    }
    EXPECT_EQ(CommLayerScope::current(), "block1");
    c->all_reduce(t);
  }
  EXPECT_EQ(CommLayerScope::current(), "");
  c->reduce_scatter(t, out);
  const auto& r = comm_log().records();
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].comm, "stage");
  EXPECT_EQ(r[0].op, "all_reduce");
  EXPECT_EQ(r[0].layer, "block1");
  EXPECT_EQ(r[0].elements, 12);
  EXPECT_EQ(r[0].bytes, 48);
  EXPECT_EQ(r[1].layer, "block1.conv");
  EXPECT_EQ(r[4].layer, "");
  EXPECT_EQ(comm_log().elements("stage", "all_reduce"), 24);
  EXPECT_EQ(comm_log().elements("stage", "all_reduce", "block1"), 24);
  EXPECT_EQ(comm_log().elements("", "", "block1.conv"), 24);
  EXPECT_EQ(comm_log().elements("row", ""), 0);
  EXPECT_EQ(comm_log().elements("", ""), 60);
  std::string report = comm_log().report();
  EXPECT_TRUE(contains(report, "block1.conv")) << report;
  EXPECT_TRUE(contains(report, "(no layer)")) << report;
  EXPECT_TRUE(contains(report, "total")) << report;
  EXPECT_TRUE(contains(report, "operation")) << report;
  comm_log().clear();
  EXPECT_TRUE(comm_log().records().empty());
}

TEST(CommLog, ReportHasOneRowPerLayerCommunicatorAndOperation) {
  CommLog log;
  log.add({"col", "all_reduce", "fc", 100, 400, 0.5});
  log.add({"col", "all_reduce", "fc", 100, 400, 0.25});
  log.add({"row", "all_gather", "fc", 10, 40, 0.125});
  std::string report = log.report();
  // header, two rows, total
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 4) << report;
  EXPECT_TRUE(contains(report, "200")) << report;
  EXPECT_TRUE(contains(report, "210")) << report;
  EXPECT_EQ(log.elements("col", "all_reduce", "fc"), 200);
}

// The test switch GRIDNN_TEST_NCCL_LOOPBACK's environment: each rank a host of its own (its
// NCCL_HOSTID), no CUDA IPC or shared memory between them, NCCL's sockets over loopback; set
// in the process, over what was there.
TEST(NcclLoopback, EachRankIsAHostOfItsOwnTalkingOverLoopback) {
  const auto as_map = [](int rank) {
    std::map<std::string, std::string> m;
    for (const auto& [name, value] : nccl_loopback_environment(rank))
      EXPECT_TRUE(m.emplace(name, value).second) << name;
    return m;
  };
  const std::map<std::string, std::string> r0 = as_map(0), r1 = as_map(1);
  EXPECT_NE(r0.at("NCCL_HOSTID"), r1.at("NCCL_HOSTID"));
  EXPECT_FALSE(r0.at("NCCL_HOSTID").empty());
  for (const auto* m : {&r0, &r1}) {
    EXPECT_EQ(m->size(), 5u);
    EXPECT_EQ(m->at("NCCL_P2P_DISABLE"), "1");
    EXPECT_EQ(m->at("NCCL_SHM_DISABLE"), "1");
    EXPECT_EQ(m->at("NCCL_NET"), "Socket");
    EXPECT_EQ(m->at("NCCL_SOCKET_IFNAME"), "lo");
  }
  setenv("NCCL_SOCKET_IFNAME", "eth0", 1);
  set_nccl_loopback_environment(7);
  for (const auto& [name, value] : as_map(7)) {
    ASSERT_NE(std::getenv(name.c_str()), nullptr) << name;
    EXPECT_EQ(std::string(std::getenv(name.c_str())), value) << name;
    unsetenv(name.c_str());
  }
}

}  // namespace
}  // namespace gridnn::parallel
