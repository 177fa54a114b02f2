// Pipeline placement (plan/placement.h, plan/gabra.h): the GPipe simulator against
// schedules computed by hand, memory accounting and the penalty, validation, the JSON files,
// exhaustive search against a brute force written differently here, and GABRA against the
// exhaustive optimum on random small heterogeneous instances (the bar: >= 95% of seeds, never
// worse than greedy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "core/error.h"
#include "plan/gabra.h"
#include "test/support/temp_dir.h"

namespace gridnn::plan {
namespace {

Profile equal_blocks(int n, double f, double b, int micro_batches) {
  Profile p;
  p.micro_batches = micro_batches;
  for (int i = 0; i < n; ++i) p.blocks.push_back({"b" + std::to_string(i), f, b, 0, 0, 0});
  return p;
}

Placement make(std::vector<int> first, std::vector<int> device) {
  Placement p;
  p.first_block = std::move(first);
  p.device = std::move(device);
  return p;
}

// In a folder of this program's own, removed at exit.
std::string temp_path(const std::string& name) {
  static const test::TempDir dir("gabra");
  return dir.file(name);
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Expects `f` to throw gridnn::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << part << "\"";
  }
}

// ---- simulator ------------------------------------------------------------------------

TEST(PlacementSimulate, OnePartitionIsMTimesForwardPlusBackward) {
  const Profile p = equal_blocks(3, 0.5, 1.0, 4);
  const Simulation s = simulate(p, uniform_cluster(1, 0, 1e9), make({0}, {0}));
  EXPECT_DOUBLE_EQ(s.iteration_s, 4 * (1.5 + 3.0));
  EXPECT_DOUBLE_EQ(s.partition_busy_s[0], 4 * 4.5);
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.penalty_s, 0);
  // Speed 2 halves it.
  Cluster fast = uniform_cluster(1, 0, 1e9);
  fast.devices[0].speed = 2;
  EXPECT_DOUBLE_EQ(simulate(p, fast, make({0}, {0})).iteration_s, 2 * (1.5 + 3.0));
}

TEST(PlacementSimulate, EqualPartitionsWithFreeLinksFillThePipeline) {
  for (int k : {2, 3, 4})
    for (int m : {1, 2, 5}) {
      const Profile p = equal_blocks(k, 1.0, 2.0, m);
      std::vector<int> first, device;
      for (int i = 0; i < k; ++i) first.push_back(i), device.push_back(k - 1 - i);
      const Simulation s = simulate(p, uniform_cluster(k, 0, 1e9), make(first, device));
      EXPECT_DOUBLE_EQ(s.iteration_s, (m + k - 1) * 1.0 + (m + k - 1) * 2.0) << k << " " << m;
    }
}

// Re-materialization: every backward but micro-batch M-1's re-runs the forward first.
// One partition, M = 4: 4 (f + b) + 3 f. Two equal partitions (f 1, b 2), M = 2, free links,
// by hand: forwards p0 [0,1] [1,2], p1 [1,2] [2,3]; backwards p1 m1 [3,5], p1 m0 [5,8]
// (1 + 2), p0 m1 [5,7], p0 m0 [8,11]: 11 (9 without).
TEST(PlacementSimulate, RecomputationAddsAForwardToEveryBackwardButTheLast) {
  Profile one = equal_blocks(3, 0.5, 1.0, 4);
  one.recompute = true;
  const Simulation s = simulate(one, uniform_cluster(1, 0, 1e9), make({0}, {0}));
  EXPECT_DOUBLE_EQ(s.iteration_s, 4 * (1.5 + 3.0) + 3 * 1.5);
  EXPECT_DOUBLE_EQ(s.partition_busy_s[0], 4 * 4.5 + 3 * 1.5);
  Profile two = equal_blocks(2, 1.0, 2.0, 2);
  EXPECT_DOUBLE_EQ(simulate(two, uniform_cluster(2, 0, 1e9), make({0, 1}, {0, 1})).iteration_s, 9);
  two.recompute = true;
  EXPECT_DOUBLE_EQ(simulate(two, uniform_cluster(2, 0, 1e9), make({0, 1}, {0, 1})).iteration_s, 11);
}

// Two partitions, M = 2, unequal stages, asymmetric links. Computed by hand:
//   F0 = 1, B0 = 2 (speed 1); F1 = 4/2 = 2, B1 = 2/2 = 1 (speed 2); 10 bytes cross the cut.
//   0 -> 1: latency 0.5, 10 bytes/s: occupies 1 s, arrives 1.5 s after it starts.
//   1 -> 0: latency 0.25, 5 bytes/s: occupies 2 s, arrives 2.25 s after it starts.
//   P0 fwd m0 [0,1], m1 [1,2]; sends: m0 [1,2] -> 2.5, m1 [2,3] -> 3.5.
//   P1 fwd m0 [2.5,4.5], m1 [4.5,6.5]; bwd m1 [6.5,7.5], m0 [7.5,8.5].
//   grads: m1 sent at 7.5, link busy to 9.5, arrives 9.75; m0 ready 8.5, waits for the link
//   until 9.5, arrives 11.75. P0 bwd m1 [9.75,11.75], m0 [11.75,13.75].
TEST(PlacementSimulate, TransfersAndUnequalStagesByHand) {
  Profile p;
  p.micro_batches = 2;
  p.blocks = {{"a", 1, 2, 10, 0, 0}, {"b", 4, 2, 99, 0, 0}};
  Cluster c = uniform_cluster(2, 0, 1);
  c.devices[1].speed = 2;
  c.latency_s = {{0, 0.5}, {0.25, 0}};
  c.bandwidth = {{0, 10}, {5, 0}};
  const Simulation s = simulate(p, c, make({0, 1}, {0, 1}));
  EXPECT_DOUBLE_EQ(s.iteration_s, 13.75);
  EXPECT_DOUBLE_EQ(s.partition_busy_s[0], 2 * 3.0);
  EXPECT_DOUBLE_EQ(s.partition_busy_s[1], 2 * 3.0);
  // Swapping the devices: F0 = 0.5, B0 = 1 on speed 2; F1 = 4, B1 = 2; links reversed.
  //   P0 fwd [0,0.5],[0.5,1]; link 1->0 (lat .25, occupy 2): m0 [0.5,2.5] -> 2.75,
  //   m1 [2.5,4.5] -> 4.75. P1 fwd [2.75,6.75],[6.75,10.75]; bwd m1 [10.75,12.75],
  //   m0 [12.75,14.75]; link 0->1 (lat .5, occupy 1): m1 [12.75,13.75] -> 14.25,
  //   m0 [14.75,15.75] -> 16.25. P0 bwd m1 [14.25,15.25], m0 [16.25,17.25].
  EXPECT_DOUBLE_EQ(simulate(p, c, make({0, 1}, {1, 0})).iteration_s, 17.25);
}

TEST(PlacementSimulate, MemoryAccountingAndPenalty) {
  Profile p;
  p.micro_batches = 3;
  p.blocks = {{"a", 1, 1, 0, 100, 10}, {"b", 1, 1, 0, 50, 20}, {"c", 1, 1, 0, 5, 1}};
  Cluster c = uniform_cluster(2, 0, 1e9, 200);
  // Partition 0 = a, b: 150 + 3 * 30 = 240 > 200; partition 1 = c: 5 + 3 = 8.
  const Simulation s = simulate(p, c, make({0, 2}, {1, 0}));
  EXPECT_DOUBLE_EQ(s.partition_memory_bytes[0], 240);
  EXPECT_DOUBLE_EQ(s.partition_memory_bytes[1], 8);
  EXPECT_FALSE(s.fits);
  // reference = M * sum(f + b) / slowest + 2 M * sum(latency + bytes / bandwidth) + 1 s.
  const double reference = 3 * 6.0 / 1 + 0 + 1;
  EXPECT_DOUBLE_EQ(penalty_reference_s(p, c), reference);
  EXPECT_DOUBLE_EQ(s.penalty_s, reference * (1 + 10 * 40.0 / 200));
  EXPECT_DOUBLE_EQ(s.fitness(), s.iteration_s + s.penalty_s);
  // a alone fits (100 + 30 = 130); b, c: 55 + 63 = 118.
  const Simulation fit = simulate(p, c, make({0, 1}, {0, 1}));
  EXPECT_TRUE(fit.fits);
  EXPECT_EQ(fit.penalty_s, 0);
  // Unlimited memory (0) never overflows; a placement that fits beats one that does not.
  c.devices[0].memory_bytes = 0;
  EXPECT_TRUE(simulate(p, c, make({0, 2}, {0, 1})).fits);
  EXPECT_LT(fit.fitness(), s.fitness());
}

// ---- validation -----------------------------------------------------------------------

TEST(PlacementValidate, SaysWhatIsWrong) {
  expect_error([] { validate(make({}, {}), 4, 2); }, {"no partition"});
  expect_error([] { validate(make({1}, {0}), 4, 2); }, {"partitions[0].first_block must be 0"});
  expect_error([] { validate(make({0, 2, 2}, {0, 1, 2}), 4, 3); }, {"partitions[2].first_block = 2", "larger than"});
  expect_error([] { validate(make({0, 4}, {0, 1}), 4, 2); }, {"out of range", "4 blocks"});
  expect_error([] { validate(make({0, 2}, {0, 2}), 4, 2); }, {"partitions[1].device = 2", "[0, 2)"});
  expect_error([] { validate(make({0, 2}, {1, 1}), 4, 2); }, {"used by another partition"});
  expect_error([] { validate(make({0, 2}, {1}), 4, 2); }, {"2 partitions", "1 devices"});
  Placement named = make({0, 1}, {0, 1});
  named.blocks = {"x", "y"};
  expect_error([&] { validate(named, 2, 2, {"x", "z"}); }, {"differ from the network"});
  EXPECT_NO_THROW(validate(named, 2, 2, {"x", "y"}));

  Profile p = equal_blocks(2, 1, 1, 1);
  p.blocks[1].name = "b0";
  expect_error([&] { validate(p); }, {"blocks[1].name", "twice"});
  p = equal_blocks(2, 1, 1, 1);
  p.blocks[0].backward_s = -1;
  expect_error([&] { validate(p); }, {"blocks[0].backward_s"});
  Cluster c = uniform_cluster(2, 0, 1);
  c.bandwidth[0][1] = 0;
  expect_error([&] { validate(c); }, {"\"bandwidth\"[0][1]", "> 0"});
  c = uniform_cluster(2, 0, 1);
  c.devices[1].speed = 0;
  expect_error([&] { validate(c); }, {"devices[1].speed"});
  c = uniform_cluster(2, 0, 1);
  c.latency_s.pop_back();
  expect_error([&] { validate(c); }, {"\"latency_s\" has 1 rows"});
}

// ---- JSON -----------------------------------------------------------------------------

TEST(PlacementJson, RoundTrips) {
  Profile p;
  p.micro_batches = 6;
  p.blocks = {{"stem", 0.25, 0.5, 1024, 4096, 512}, {"layer1.0", 1e-3, 2e-3, 3, 0, 7}};
  const std::string pp = temp_path("profile.json");
  write_text_file(pp, profile_json(p));
  const Profile q = read_profile(pp);
  ASSERT_EQ(q.blocks.size(), 2u);
  EXPECT_EQ(q.micro_batches, 6);
  EXPECT_EQ(q.blocks[1].name, "layer1.0");
  EXPECT_EQ(q.blocks[0].forward_s, 0.25);
  EXPECT_EQ(q.blocks[1].backward_s, 2e-3);
  EXPECT_EQ(q.blocks[0].activation_bytes, 1024);
  EXPECT_EQ(q.blocks[0].memory_bytes, 4096);
  EXPECT_EQ(q.blocks[1].stash_bytes, 7);
  EXPECT_FALSE(q.recompute);
  p.recompute = true;
  write_text_file(pp, profile_json(p));
  EXPECT_TRUE(read_profile(pp).recompute);

  Cluster c = uniform_cluster(3, 1e-5, 1e10, 8e9);
  c.devices[2].speed = 0.5;
  c.bandwidth[0][2] = 2e9;
  const std::string cp = temp_path("cluster.json");
  write_text_file(cp, cluster_json(c));
  const Cluster d = read_cluster(cp);
  EXPECT_EQ(d.devices[2].speed, 0.5);
  EXPECT_EQ(d.devices[1].memory_bytes, 8e9);
  EXPECT_EQ(d.devices[1].name, "device1");
  EXPECT_EQ(d.bandwidth[0][2], 2e9);
  EXPECT_EQ(d.bandwidth[2][0], 1e10);
  EXPECT_EQ(d.latency_s[1][2], 1e-5);
  // Scalar links are accepted too.
  const std::string sp = temp_path("scalar.json");
  write(sp, R"({"devices": [{"speed": 1}, {"speed": 2, "memory_bytes": 5}],
               "latency_s": 0.001, "bandwidth": 1e9})");
  const Cluster s = read_cluster(sp);
  EXPECT_EQ(s.latency_s[0][1], 0.001);
  EXPECT_EQ(s.bandwidth[1][0], 1e9);
  EXPECT_EQ(s.devices[1].memory_bytes, 5);

  Placement pl = make({0, 1}, {1, 0});
  pl.blocks = {"stem", "layer1.0"};
  const std::string lp = temp_path("placement.json");
  write_text_file(lp, placement_json(pl, simulate(p, d, pl)));
  const Placement r = read_placement(lp);
  EXPECT_EQ(r.first_block, pl.first_block);
  EXPECT_EQ(r.device, pl.device);
  EXPECT_EQ(r.blocks, pl.blocks);
  std::ifstream in(lp);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"simulated_iteration_s\""), std::string::npos);
}

TEST(PlacementJson, CorruptOrMissingFieldsNameTheFileAndField) {
  const std::string path = temp_path("bad.json");
  write(path, "{\"micro_batches\": 2, \"blocks\": [{\"name\": \"a\", \"forward_s\": 1}");
  expect_error([&] { read_profile(path); }, {path, "not valid JSON"});
  write(path, R"({"micro_batches": 2, "blocks": [{"name": "a", "forward_s": 1,
                 "activation_bytes": 1}]})");
  expect_error([&] { read_profile(path); }, {path, "blocks[0].backward_s is missing"});
  write(path, R"({"micro_batches": 2, "blocks": [{"name": "a", "forward_s": "1",
                 "backward_s": 1, "activation_bytes": 1}]})");
  expect_error([&] { read_profile(path); }, {path, "blocks[0].forward_s must be a number"});
  write(path, R"({"blocks": []})");
  expect_error([&] { read_profile(path); }, {path, "micro_batches is missing"});
  write(path, R"({"micro_batches": 0, "blocks": [{"name": "a", "forward_s": 1,
                 "backward_s": 1, "activation_bytes": 1}]})");
  expect_error([&] { read_profile(path); }, {path, "micro_batches\" must be >= 1"});
  expect_error([&] { read_profile(temp_path("does_not_exist.json")); }, {"cannot open"});

  write(path, R"({"devices": [{"speed": 1}, {"speed": 1}], "latency_s": [[0, 1]],
                 "bandwidth": 1})");
  expect_error([&] { read_cluster(path); }, {path, "latency_s", "2 x 2"});
  write(path, R"({"devices": [{"speed": 1}, {"speed": -1}], "latency_s": 0, "bandwidth": 1})");
  expect_error([&] { read_cluster(path); }, {path, "devices[1].speed"});
  write(path, R"({"devices": [{"speed": 1}], "latency_s": 0})");
  expect_error([&] { read_cluster(path); }, {path, "bandwidth is missing"});

  write(path, R"({"blocks": ["a", "b"], "partitions": [{"device": 0, "first_block": 0},
                 {"device": 0, "first_block": 1}]})");
  expect_error([&] { read_placement(path); }, {path, "partitions[1].device"});
  write(path, R"({"blocks": ["a", "b"], "partitions": [{"device": 0}]})");
  expect_error([&] { read_placement(path); }, {path, "partitions[0].first_block is missing"});
  write(path, R"({"blocks": ["a", "b"], "partitions": [{"device": 0, "first_block": 0,
                 "blocks": ["a"]}]})");
  expect_error([&] { read_placement(path); }, {path, "partitions[0].blocks does not match"});
}

// ---- random small instances -----------------------------------------------------------

struct Instance {
  Profile profile;
  Cluster cluster;
  int partitions;
};

// <= 8 blocks, <= 4 devices, speeds 0.5..4, random asymmetric links, block times and sizes;
// memory limits that bind in about half the instances.
Instance random_instance(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Instance in;
  const int n = pick(2, 8), d = pick(1, 4);
  in.profile.micro_batches = pick(1, 8);
  double need = 0;
  for (int i = 0; i < n; ++i) {
    BlockProfile b{"b" + std::to_string(i),     1e-3 + 1e-2 * u(rng), 2e-3 + 2e-2 * u(rng),
                   1e5 + 1e8 * u(rng) * u(rng), 1e8 * u(rng),         2e7 * u(rng)};
    need += b.memory_bytes + in.profile.micro_batches * b.stash_bytes;
    in.profile.blocks.push_back(b);
  }
  in.cluster = uniform_cluster(d, 0, 1);
  for (int i = 0; i < d; ++i) {
    in.cluster.devices[size_t(i)].speed = 0.5 + 3.5 * u(rng);
    in.cluster.devices[size_t(i)].memory_bytes = u(rng) < 0.5 ? 0 : need * (0.25 + 0.75 * u(rng));
    for (int j = 0; j < d; ++j) {
      in.cluster.latency_s[size_t(i)][size_t(j)] = 1e-3 * u(rng);
      in.cluster.bandwidth[size_t(i)][size_t(j)] = 1e9 + 2e10 * u(rng);
    }
  }
  const int k_max = std::min(n, d);
  in.partitions = seed % 2 ? 0 : pick(1, k_max);
  return in;
}

// Every placement, enumerated differently from exhaustive(): cut sets as bit masks over the
// n - 1 gaps, devices as permutations of every subset.
template <class F>
void for_every_placement(int n, int d, int partitions, F&& visit) {
  for (unsigned mask = 0; mask < (1u << (n - 1)); ++mask) {
    std::vector<int> first{0};
    for (int g = 0; g < n - 1; ++g)
      if (mask & (1u << g)) first.push_back(g + 1);
    const int k = int(first.size());
    if (k > d || (partitions > 0 && k != partitions)) continue;
    for (unsigned subset = 0; subset < (1u << d); ++subset) {
      if (__builtin_popcount(subset) != k) continue;
      std::vector<int> devices;
      for (int x = 0; x < d; ++x)
        if (subset & (1u << x)) devices.push_back(x);
      do {
        visit(make(first, devices));
      } while (std::next_permutation(devices.begin(), devices.end()));
    }
  }
}

double brute_force(const Profile& p, const Cluster& c, int partitions) {
  double best = 1e300;
  for_every_placement(int(p.blocks.size()), c.size(), partitions,
                      [&](const Placement& x) { best = std::min(best, simulate(p, c, x).fitness()); });
  return best;
}

TEST(PlacementSimulate, PenaltyReferenceBoundsEveryIterationTime) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Instance in = random_instance(500 + seed);
    const double reference = penalty_reference_s(in.profile, in.cluster);
    for_every_placement(int(in.profile.blocks.size()), in.cluster.size(), 0, [&](const Placement& x) {
      const Simulation s = simulate(in.profile, in.cluster, x);
      EXPECT_LT(s.iteration_s, reference);
      if (!s.fits) {
        EXPECT_GT(s.fitness(), reference);
      }
    });
  }
}

TEST(PlacementSearch, ExhaustiveMatchesABruteForce) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const Instance in = random_instance(seed);
    const SearchResult r = exhaustive(in.profile, in.cluster, in.partitions);
    EXPECT_DOUBLE_EQ(r.simulation.fitness(), brute_force(in.profile, in.cluster, in.partitions)) << "seed " << seed;
    EXPECT_EQ(r.evaluations, exhaustive_candidates(in.profile, in.cluster, in.partitions));
    EXPECT_NO_THROW(validate(r.placement, int(in.profile.blocks.size()), in.cluster.size(), r.placement.blocks));
  }
  const Instance big = random_instance(2);
  expect_error([&] { exhaustive(big.profile, big.cluster, 0, 3); }, {"exceed the limit of 3"});
}

TEST(PlacementSearch, BaselinesFollowTheirRules) {
  const Profile p = equal_blocks(7, 1, 2, 4);
  Cluster c = uniform_cluster(3, 0, 1e12);
  const SearchResult rr = round_robin(p, c, 3);
  EXPECT_EQ(rr.placement.first_block, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(rr.placement.device, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(rr.placement.blocks.size(), 7u);
  // Speeds 1, 2, 4: 7 equal blocks, the balanced split gives the fastest the most blocks.
  c.devices[0].speed = 1;
  c.devices[1].speed = 4;
  c.devices[2].speed = 2;
  const SearchResult g = greedy(p, c, 3);
  int blocks_on_fastest = 0;
  for (int k = 0; k < 3; ++k)
    if (g.placement.device[size_t(k)] == 1) blocks_on_fastest = g.placement.end(k, 7) - g.placement.begin(k);
  EXPECT_EQ(blocks_on_fastest, 4);
  expect_error([&] { greedy(p, c, 4); }, {"partitions = 4", "[1, 3]"});
}

TEST(PlacementSearch, GabraReachesTheOptimumAndNeverLosesToGreedy) {
  const int instances = 200;
  int optimal = 0, memory_binds = 0, nothing_fits = 0;
  for (uint64_t seed = 1; seed <= uint64_t(instances); ++seed) {
    const Instance in = random_instance(1000 + seed);
    GaOptions o;
    o.seed = seed;
    const SearchResult ga = gabra(in.profile, in.cluster, in.partitions, o);
    const SearchResult best = exhaustive(in.profile, in.cluster, in.partitions);
    const SearchResult gr = greedy(in.profile, in.cluster, in.partitions);
    Cluster unlimited = in.cluster;
    for (Device& d : unlimited.devices) d.memory_bytes = 0;
    const Placement free = exhaustive(in.profile, unlimited, in.partitions).placement;
    if (!simulate(in.profile, in.cluster, free).fits) ++memory_binds;
    if (!best.simulation.fits) ++nothing_fits;
    EXPECT_LE(ga.simulation.fitness(), gr.simulation.fitness()) << "seed " << seed;
    EXPECT_GE(ga.simulation.fitness(), best.simulation.fitness() * (1 - 1e-12));
    if (ga.simulation.fitness() <= best.simulation.fitness() * (1 + 1e-9)) ++optimal;
    if (in.partitions > 0) {
      EXPECT_EQ(ga.placement.partitions(), in.partitions);
    }
    // The result is what it claims.
    EXPECT_DOUBLE_EQ(simulate(in.profile, in.cluster, ga.placement).fitness(), ga.simulation.fitness());
  }
  std::printf(
      "GABRA reached the exhaustive optimum on %d of %d instances (memory changed the "
      "optimum in %d, no placement fits in %d)\n",
      optimal, instances, memory_binds, nothing_fits);
  EXPECT_GE(memory_binds, instances / 10);  // the instances exercise the penalty
  EXPECT_GE(optimal, int(std::ceil(0.95 * instances)));
}

TEST(PlacementSearch, OneBlockGoesToTheFastestDeviceThatHoldsIt) {
  Profile p = equal_blocks(1, 1, 2, 4);
  p.blocks[0].memory_bytes = 10;
  Cluster c = uniform_cluster(3, 1e-3, 1e9, 100);
  c.devices[1].speed = 3;  // fastest, but too small
  c.devices[1].memory_bytes = 5;
  c.devices[2].speed = 2;
  for (int k : {0, 1}) {
    const SearchResult r = gabra(p, c, k);
    EXPECT_EQ(r.placement.first_block, std::vector<int>{0});
    EXPECT_EQ(r.placement.device, std::vector<int>{2});
    EXPECT_DOUBLE_EQ(r.simulation.iteration_s, 4 * 3.0 / 2);
    EXPECT_EQ(greedy(p, c, k).placement.device, std::vector<int>{2});
    EXPECT_EQ(exhaustive(p, c, k).placement.device, std::vector<int>{2});
  }
  // One device: every method puts everything on it.
  const Cluster one = uniform_cluster(1, 0, 1e9);
  const Profile four = equal_blocks(4, 1, 1, 2);
  EXPECT_EQ(gabra(four, one, 0).placement.partitions(), 1);
  EXPECT_EQ(round_robin(four, one, 0).placement.partitions(), 1);
}

TEST(PlacementSearch, GabraIsDeterministicPerSeed) {
  const Instance in = random_instance(77);
  GaOptions o;
  o.seed = 42;
  const SearchResult a = gabra(in.profile, in.cluster, 0, o);
  const SearchResult b = gabra(in.profile, in.cluster, 0, o);
  EXPECT_EQ(a.placement.first_block, b.placement.first_block);
  EXPECT_EQ(a.placement.device, b.placement.device);
  EXPECT_EQ(a.evaluations, b.evaluations);
  EXPECT_EQ(a.generations, b.generations);
  EXPECT_EQ(a.simulation.fitness(), b.simulation.fitness());
}

}  // namespace
}  // namespace gridnn::plan
