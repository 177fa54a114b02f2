// The cost model's calibration (plan/calibration.h): the α–β fit on synthetic samples,
// the JSON file and its errors, and the cost model's use of measured compute tables
// (plan/cost_model.h), each against values computed here by hand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "plan/calibration.h"
#include "test/support/error_message.h"
#include "test/support/temp_dir.h"

namespace gridnn::plan {
namespace {

using test::error_message;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// t = α m + β w in the model's conventions, for the given ops on p ranks at sizes 4^k.
std::vector<CommSample> synthetic(double alpha, double beta, int p, double noise = 0, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  std::vector<CommSample> out;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"})
    for (int64_t n = 1; n <= (int64_t(1) << 22); n *= 4) {
      const auto [m, w] = model_messages_words(op, p, n);
      out.push_back({op, p, n, (alpha * m + beta * w) * (1 + u(rng))});
    }
  return out;
}

TEST(Calibration, ModelConventions) {
  // p = 4: ⌈log2 4⌉ = 2; p = 5: 3.
  EXPECT_EQ(model_messages_words("all_reduce", 4, 100), std::make_pair(4.0, 150.0));
  EXPECT_EQ(model_messages_words("all_gather", 4, 100), std::make_pair(2.0, 75.0));
  EXPECT_EQ(model_messages_words("reduce_scatter", 5, 100), std::make_pair(3.0, 80.0));
  EXPECT_EQ(model_messages_words("pingpong", 2, 100), std::make_pair(1.0, 100.0));
  EXPECT_EQ(model_messages_words("halo", 2, 100), std::make_pair(1.0, 100.0));  // one neighbour
  EXPECT_EQ(model_messages_words("halo", 3, 100), std::make_pair(1.0, 200.0));  // two
  EXPECT_EQ(model_messages_words("all_reduce", 1, 100), std::make_pair(0.0, 0.0));
  EXPECT_TRUE(contains(error_message([] { model_messages_words("broadcast", 2, 1); }), "\"broadcast\""));
}

TEST(Calibration, FitRecoversAlphaBetaExactly) {
  const double alpha = 5e-6, beta = 4.0 / 25e9;  // 5 µs, 25 GB/s
  for (int p : {2, 4, 6}) {
    const CommFit f = fit_alpha_beta(synthetic(alpha, beta, p));
    EXPECT_NEAR(f.alpha, alpha, 1e-9 * alpha) << p;
    EXPECT_NEAR(f.beta, beta, 1e-9 * beta) << p;
    EXPECT_LT(f.residual, 1e-9);
    EXPECT_EQ(f.samples.size(), 36u);
  }
}

TEST(Calibration, FitWithNoiseIsClose) {
  const double alpha = 2e-6, beta = 4.0 / 6e9;
  const CommFit f = fit_alpha_beta(synthetic(alpha, beta, 4, 0.05, 7));  // ±5% per sample
  EXPECT_NEAR(f.alpha, alpha, 0.05 * alpha);
  EXPECT_NEAR(f.beta, beta, 0.05 * beta);
  EXPECT_GT(f.residual, 0.005);
  EXPECT_LT(f.residual, 0.05);
}

TEST(Calibration, FitIsNonNegative) {
  // Pure bandwidth (α = 0) with the small sizes measured a little fast: the unconstrained
  // fit's α would be negative; the fit clamps it to 0 and refits β.
  std::vector<CommSample> s;
  for (int64_t n : {1, 4, 16, 1024, 65536}) s.push_back({"pingpong", 2, n, 1e-9 * double(n) * (n < 100 ? 0.5 : 1.0)});
  const CommFit f = fit_alpha_beta(s);
  EXPECT_EQ(f.alpha, 0.0);
  EXPECT_GT(f.beta, 0.0);
  // Pure latency: β clamps to 0.
  std::vector<CommSample> l;
  for (int64_t n : {1, 4, 16, 1024, 65536}) l.push_back({"pingpong", 2, n, 3e-6 * (n < 100 ? 1.1 : 1.0)});
  const CommFit g = fit_alpha_beta(l);
  EXPECT_EQ(g.beta, 0.0);
  EXPECT_NEAR(g.alpha, 3e-6, 0.2e-6);
}

TEST(Calibration, FitRejectsTooFewSamples) {
  EXPECT_TRUE(contains(error_message([] { fit_alpha_beta({}); }), "two or more sizes"));
  EXPECT_TRUE(contains(error_message([] { fit_alpha_beta({{"all_reduce", 4, 1024, 1e-3}}); }), "got 1 usable of 1"));
  // Two samples of one size cannot separate α from β; nor can samples on one rank.
  EXPECT_TRUE(contains(error_message([] {
                         fit_alpha_beta({{"all_reduce", 4, 1024, 1e-3}, {"all_reduce", 4, 1024, 2e-3}});
                       }),
                       "two or more sizes"));
  EXPECT_TRUE(contains(error_message([] {
                         fit_alpha_beta({{"all_reduce", 1, 1, 1e-6}, {"all_reduce", 1, 1024, 1e-6}});
                       }),
                       "got 0 usable of 2"));
  EXPECT_TRUE(contains(error_message([] {
                         fit_alpha_beta({{"all_reduce", 2, 1, 0.0}, {"all_reduce", 2, 1024, 1e-6}});
                       }),
                       "must be finite and > 0"));
}

// An all-reduce at 3x the β of the gathers (it adds what it sums): the kind's one fit misses,
// each operation's recovers its own; the pingpong gets none (no step calls it).
TEST(Calibration, EachOperationGetsItsOwnFit) {
  const double alpha = 2e-6, beta = 4.0 / 10e9;
  std::vector<CommSample> s = synthetic(alpha, beta, 2);
  for (CommSample& x : s)
    if (x.op == "all_reduce") x.seconds = alpha * 2 + 3 * beta * double(x.elements);  // m = 2, w = n on 2 ranks
  for (int64_t n : {1, 1024, 65536}) s.push_back({"pingpong", 2, n, 1e-6 + 1e-10 * double(n)});
  const KindFit f = fit_per_op(s);
  EXPECT_EQ(f.samples.size(), s.size());
  EXPECT_LT(f.beta, 2.95 * beta);  // one line through them all fits none
  EXPECT_GT(f.residual, 0.05);
  ASSERT_EQ(f.ops.size(), 3u);
  EXPECT_NEAR(f.ops.at("all_reduce").beta, 3 * beta, 1e-9 * beta);
  EXPECT_NEAR(f.ops.at("all_reduce").alpha, alpha, 1e-9 * alpha);
  for (const char* op : {"all_gather", "reduce_scatter"}) {
    EXPECT_NEAR(f.ops.at(op).beta, beta, 1e-9 * beta) << op;
    EXPECT_LT(f.ops.at(op).residual, 1e-9) << op;
  }
  EXPECT_EQ(f.ops.count("pingpong"), 0u);
  EXPECT_EQ(call_ops("all_gather"), (std::vector<std::string>{"all_gatherv", "all_gather"}));
  EXPECT_EQ(call_ops("reduce_scatter"), std::vector<std::string>{"reduce_scatterv"});
  EXPECT_EQ(call_ops("halo"), std::vector<std::string>{"send_recv"});
  EXPECT_EQ(call_ops("all_reduce"), std::vector<std::string>{"all_reduce"});
  EXPECT_TRUE(call_ops("pingpong").empty());

  // The model costs a call at its operation's α and β, under a step's names for them.
  Calibration c;
  c.comm["row"] = f;
  const Machine m = machine_from(c, "row");
  ASSERT_EQ(m.ops.size(), 4u);
  EXPECT_EQ(m.ops.at("all_gatherv").beta, f.ops.at("all_gather").beta);
  EXPECT_EQ(m.ops.at("all_gather").beta, f.ops.at("all_gather").beta);
  RankStep r;
  r.calls.push_back(make_call("gradients", "row", "all_reduce", 1000000, 2));
  r.calls.push_back(make_call("att3", "row", "all_gatherv", 1000, 2, 1000));
  const PlanCost p = estimate_ranks({r, r}, Grid{2, 1}, m);
  const double reduce = f.ops.at("all_reduce").alpha * 2 + f.ops.at("all_reduce").beta * 1e6;
  const double gather = f.ops.at("all_gather").alpha * 1 + f.ops.at("all_gather").beta * 1000;
  EXPECT_DOUBLE_EQ(p.comm_s(), reduce + gather);
  Machine kind_only = m;
  kind_only.ops.clear();
  EXPECT_DOUBLE_EQ(estimate_ranks({r, r}, Grid{2, 1}, kind_only).comm_s(), f.alpha * 3 + f.beta * (1e6 + 1000));
}

// An operation measured at one size cannot be fitted alone: it gets no fit of its own, the
// others keep theirs.
TEST(Calibration, AnOperationOfOneSizeLeavesTheOthersTheirFits) {
  std::vector<CommSample> s = synthetic(2e-6, 4.0 / 10e9, 4);
  s.push_back({"halo", 4, 1024, 1e-5});
  const KindFit f = fit_per_op(s);
  EXPECT_EQ(f.ops.size(), 3u);
  EXPECT_EQ(f.ops.count("halo"), 0u);
}

TEST(Calibration, MedianAndSelfCommunicator) {
  EXPECT_EQ(median({3, 1, 2}), 2.0);
  EXPECT_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_EQ(median({}), 0.0);
  // On one rank every collective moves nothing: samples come back, the fit ignores them.
  auto self = parallel::make_self_communicator("world");
  const auto s = time_comm_op(*self, "all_reduce", {1, 64}, {1, 3});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].procs, 1);
  EXPECT_EQ(s[1].elements, 64);
  EXPECT_GE(s[1].seconds, 0.0);
  EXPECT_TRUE(contains(error_message([&] { time_comm_op(*self, "pingpong", {1}); }), "at least 2 ranks"));
}

Calibration sample_calibration() {
  Calibration c;
  c.machine = "test machine";
  c.date = "2026-12-02T00:00:00Z";
  c.grid = "2x2";
  c.procs = 4;
  c.model = "ResAttNet3D-18";
  c.comm["world"] = fit_per_op(synthetic(5e-6, 4.0 / 25e9, 4));
  c.comm["row"] = fit_per_op(synthetic(1e-6, 4.0 / 100e9, 2));
  c.compute["conv1"] = {1000, {{1, 0.1}, {2, 0.2}, {4, 0.5}}, {}};
  c.compute["conv1"].slabs.push_back({{10, 32, 32}, {4, 16, 16}, 450, {{1, 0.06}, {4, 0.3}}});
  c.compute["fc"] = {0, {{1, 1e-5}}, {}};
  return c;
}

// In a folder of this program's own, removed at exit.
std::string temp_path(const std::string& name) {
  static const test::TempDir dir("calib");
  return dir.file(name + ".json");
}

TEST(Calibration, JsonRoundTrip) {
  const Calibration c = sample_calibration();
  const std::string path = temp_path("roundtrip");
  write_calibration(c, path);
  const Calibration r = read_calibration(path);
  EXPECT_EQ(r.machine, c.machine);
  EXPECT_EQ(r.date, c.date);
  EXPECT_EQ(r.grid, "2x2");
  EXPECT_EQ(r.procs, 4);
  EXPECT_EQ(r.model, c.model);
  ASSERT_EQ(r.comm.size(), 2u);
  EXPECT_DOUBLE_EQ(r.comm.at("world").alpha, c.comm.at("world").alpha);
  EXPECT_DOUBLE_EQ(r.comm.at("row").beta, c.comm.at("row").beta);
  ASSERT_EQ(r.comm.at("world").samples.size(), c.comm.at("world").samples.size());
  EXPECT_EQ(r.comm.at("world").samples[5].op, c.comm.at("world").samples[5].op);
  EXPECT_EQ(r.comm.at("world").samples[5].elements, c.comm.at("world").samples[5].elements);
  EXPECT_DOUBLE_EQ(r.comm.at("world").samples[5].seconds, c.comm.at("world").samples[5].seconds);
  ASSERT_EQ(r.comm.at("world").ops.size(), 3u);
  EXPECT_DOUBLE_EQ(r.comm.at("world").ops.at("reduce_scatter").beta, c.comm.at("world").ops.at("reduce_scatter").beta);
  EXPECT_DOUBLE_EQ(r.comm.at("row").ops.at("all_reduce").alpha, c.comm.at("row").ops.at("all_reduce").alpha);
  ASSERT_EQ(r.compute.size(), 2u);
  EXPECT_EQ(r.compute.at("conv1").forward_flops, 1000);
  EXPECT_EQ(r.compute.at("conv1").seconds, c.compute.at("conv1").seconds);
  ASSERT_EQ(r.compute.at("conv1").slabs.size(), 1u);
  const SlabTable& slab = r.compute.at("conv1").slabs[0];
  EXPECT_EQ(slab.in_size, (std::array<int64_t, 3>{10, 32, 32}));
  EXPECT_EQ(slab.out_size, (std::array<int64_t, 3>{4, 16, 16}));
  EXPECT_EQ(slab.forward_flops, 450);
  EXPECT_EQ(slab.seconds, c.compute.at("conv1").slabs[0].seconds);
  EXPECT_TRUE(r.compute.at("fc").slabs.empty());
  // Written atomically: no temporary file left beside it.
  std::ifstream tmp(path + ".tmp." + std::to_string(::getpid()));
  EXPECT_FALSE(tmp.good());
  std::remove(path.c_str());
}

// The message of reading `c`'s JSON after `edit`.
std::string corrupt(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(calibration_to_json(sample_calibration()));
  edit(j);
  return error_message([&] { calibration_from_json(j.dump(), "calib.json"); });
}

TEST(Calibration, CorruptFieldsAreNamed) {
  using nlohmann::json;
  EXPECT_EQ(corrupt([](json&) {}), "(no error)");
  EXPECT_EQ(corrupt([](json& j) { j["comm"]["world"].erase("alpha"); }), "calib.json: comm.world.alpha: missing");
  EXPECT_TRUE(contains(corrupt([](json& j) { j["comm"]["row"]["beta"] = "fast"; }),
                       "calib.json: comm.row.beta: expected a number"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["comm"]["row"]["beta"] = -1; }), "comm.row.beta: expected a finite"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["comm"]["world"]["samples"][3].erase("seconds"); }),
                       "calib.json: comm.world.samples[3].seconds: missing"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["comm"]["world"]["samples"][0]["op"] = "gossip"; }),
                       "comm.world.samples[0].op: calibration: unknown operation \"gossip\""));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["compute"]["conv1"]["seconds"][1]["seconds"] = 0; }),
                       "calib.json: compute.conv1.seconds[1].seconds: expected a finite number > 0"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["compute"]["conv1"]["seconds"][1]["batch"] = 1; }),
                       "compute.conv1.seconds[1].batch: batch 1 listed twice"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["compute"]["fc"]["seconds"] = json::array(); }),
                       "compute.fc.seconds: expected at least one"));
  EXPECT_TRUE(contains(corrupt([](json& j) {
                         j["compute"]["conv1"]["slabs"][0]["in_size"] = {10, 32};
                       }),
                       "calib.json: compute.conv1.slabs[0].in_size: expected [D, H, W], got [10,32]"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["compute"]["conv1"]["slabs"][0]["out_size"][1] = 0; }),
                       "compute.conv1.slabs[0].out_size: expected [D, H, W] of integers >= 1"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["compute"]["conv1"]["slabs"][0]["seconds"][0]["seconds"] = -1; }),
                       "compute.conv1.slabs[0].seconds[0].seconds: expected a finite number > 0"));
  EXPECT_TRUE(
      contains(corrupt([](json& j) { j["compute"]["conv1"]["slabs"] = 3; }), "compute.conv1.slabs: expected an array"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["comm"]["row"]["ops"]["all_reduce"].erase("beta"); }),
                       "calib.json: comm.row.ops.all_reduce.beta: missing"));
  EXPECT_TRUE(
      contains(corrupt([](json& j) { j["comm"]["row"]["ops"]["gossip"] = j["comm"]["row"]["ops"]["all_reduce"]; }),
               "comm.row.ops.gossip: expected all_reduce, all_gather, reduce_scatter or halo"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j.erase("compute"); }), "calib.json: compute: missing"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["procs"] = 0; }), "calib.json: procs: expected an integer >= 1"));
  EXPECT_TRUE(contains(corrupt([](json& j) { j["format"] = "other"; }), "calib.json: format: expected"));
  EXPECT_TRUE(contains(error_message([] { calibration_from_json("{\"format\": ", "calib.json"); }),
                       "calib.json: not valid JSON"));
  EXPECT_TRUE(contains(error_message([] { read_calibration("/nonexistent/calib.json"); }),
                       "/nonexistent/calib.json: cannot open the calibration file"));
}

// A file written before the per-operation fits gets them from its samples.
TEST(Calibration, AFileWithoutPerOperationFitsFitsThemOnReading) {
  nlohmann::json j = nlohmann::json::parse(calibration_to_json(sample_calibration()));
  for (auto& [kind, f] : j["comm"].items()) f.erase("ops");
  const Calibration r = calibration_from_json(j.dump(), "old.json");
  const KindFit refit = fit_per_op(sample_calibration().comm.at("world").samples);
  ASSERT_EQ(r.comm.at("world").ops.size(), 3u);
  EXPECT_EQ(r.comm.at("world").ops.at("all_gather").beta, refit.ops.at("all_gather").beta);
}

TEST(Calibration, MachineFromKind) {
  const Calibration c = sample_calibration();
  const Machine m = machine_from(c, "row", Machine{1, 1, 3e12});
  EXPECT_DOUBLE_EQ(m.alpha, c.comm.at("row").alpha);
  EXPECT_DOUBLE_EQ(m.beta, c.comm.at("row").beta);
  EXPECT_EQ(m.flops, 3e12);
  ASSERT_TRUE(m.compute);
  EXPECT_EQ(m.compute->size(), 2u);
  EXPECT_EQ(error_message([&] { machine_from(c, "col"); }),
            "calibration: no communicator kind \"col\" (the file has: row, world)");
}

// ---- the cost model with measured compute -----------------------------------------------

TEST(Calibration, ComputeTableInterpolates) {
  const ComputeTable t{0, {{1, 0.1}, {2, 0.2}, {4, 0.5}}, {}};
  EXPECT_DOUBLE_EQ(t.at(1), 0.1);
  EXPECT_DOUBLE_EQ(t.at(2), 0.2);
  EXPECT_DOUBLE_EQ(t.at(3), 0.35);  // halfway between 0.2 and 0.5
  EXPECT_DOUBLE_EQ(t.at(1.5), 0.15);
  EXPECT_DOUBLE_EQ(t.at(8), 1.0);     // beyond: proportional to the largest
  EXPECT_DOUBLE_EQ(t.at(0.5), 0.05);  // below: proportional to the smallest
  EXPECT_EQ(t.at(0), 0.0);
}

// A layer of the rank's shape costs its slab's time; another shape of the same layer (another
// slab, or the FLOPs of another width) the whole table's, scaled.
TEST(Calibration, ASlabOfTheRanksShapeIsUsedAsMeasured) {
  const Calibration c = sample_calibration();
  const Machine m = machine_from(c, "");
  LayerShape l;
  l.name = "conv1";
  l.in_size = {10, 32, 32};
  l.out_size = {4, 16, 16};
  l.forward_flops = 450;
  EXPECT_DOUBLE_EQ(layer_compute_s(l, 1, 1.0, m), 0.06);
  EXPECT_DOUBLE_EQ(layer_compute_s(l, 2, 1.0, m), 0.06 + (0.3 - 0.06) / 3);  // between batches 1 and 4
  EXPECT_DOUBLE_EQ(layer_compute_s(l, 8, 1.0, m), 0.6);
  l.in_size = {9, 32, 32};  // the other rank's slab, not measured
  EXPECT_DOUBLE_EQ(layer_compute_s(l, 2, 1.0, m), 0.2 * 450 / 1000);
  l.in_size = {10, 32, 32};
  l.forward_flops = 900;  // twice the channels
  EXPECT_DOUBLE_EQ(layer_compute_s(l, 4, 1.0, m), 0.5 * 900 / 1000);
}

}  // namespace
}  // namespace gridnn::plan
