// Placement quality of GABRA against the baselines (docs/design.md §7) on simulated
// heterogeneous clusters: random ResAttNet-like profiles (block times, activations shrinking
// with depth, parameters growing) on clusters of two speed classes (device 0 fast), fast
// links inside a node and slow ones between nodes, memory that binds for the smaller devices.
// Per instance: round-robin, greedy, GABRA and (when it has at most --exhaustive-limit
// candidates) exhaustive simulated iteration times; GABRA's gap to the optimum, or to the best
// known (the best of the methods and of a long GABRA run with 4 more seeds); search seconds.
//
//   bench_placement [--instances 4] [--seed 1] [--exhaustive-limit 20000000]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "plan/gabra.h"

namespace {

using namespace gridnn::plan;

Profile random_profile(int blocks, int micro_batches, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  Profile p;
  p.micro_batches = micro_batches;
  for (int i = 0; i < blocks; ++i) {
    const double depth = double(i) / std::max(blocks - 1, 1);  // 0 at the stem, 1 at the head
    BlockProfile b;
    b.name = "block" + std::to_string(i);
    b.forward_s = (2e-3 + 6e-3 * u(rng)) * (i + 1 == blocks ? 0.05 : 1.0);
    b.backward_s = b.forward_s * (1.8 + 0.4 * u(rng));
    b.activation_bytes = 64e6 * std::pow(0.25, 3 * depth) * (0.5 + u(rng));
    b.memory_bytes = 2e6 * std::pow(8.0, 3 * depth) * (0.5 + u(rng));
    b.stash_bytes = 3 * b.activation_bytes;
    p.blocks.push_back(b);
  }
  return p;
}

Cluster random_cluster(int devices, const Profile& p, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  double need = 0;
  for (const BlockProfile& b : p.blocks) need += b.memory_bytes + p.micro_batches * b.stash_bytes;
  Cluster c = uniform_cluster(devices, 0, 1);
  const int per_node = 2;
  for (int d = 0; d < devices; ++d) {
    const bool fast = d == 0 || u(rng) < 0.5;  // at least one device holds everything
    c.devices[size_t(d)].name = "n" + std::to_string(d / per_node) + "g" + std::to_string(d % per_node);
    c.devices[size_t(d)].speed = fast ? 2.0 + 2.0 * u(rng) : 0.5 + 1.0 * u(rng);
    // Small devices hold about a fifth of the network, large ones all of it.
    c.devices[size_t(d)].memory_bytes = need * (fast ? 1.0 : 0.15 + 0.2 * u(rng));
    for (int e = 0; e < devices; ++e) {
      const bool same_node = d / per_node == e / per_node;
      c.latency_s[size_t(d)][size_t(e)] = same_node ? 2e-6 : 10e-6 + 20e-6 * u(rng);
      c.bandwidth[size_t(d)][size_t(e)] = same_node ? 50e9 + 50e9 * u(rng) : 2e9 + 10e9 * u(rng);
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int instances = 4;
  uint64_t seed = 1;
  int64_t exhaustive_limit = 20'000'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--instances")
      instances = std::atoi(argv[i + 1]);
    else if (flag == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--exhaustive-limit")
      exhaustive_limit = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_placement: unknown flag %s\n", flag.c_str());
      return 1;
    }
  }
  struct Shape {
    int blocks, devices, micro_batches;
  };
  const Shape shapes[] = {{12, 4, 8}, {16, 6, 8}, {20, 8, 16}, {34, 8, 16}};
  std::printf("%-10s %6s %7s %3s %12s %12s %12s %12s %9s %5s %9s %9s %9s\n", "instance", "blocks", "devices", "M",
              "round-robin", "greedy", "gabra", "exhaustive", "GA gap", "ref", "GA s", "greedy s", "exh. s");
  for (const Shape& shape : shapes)
    for (int i = 0; i < instances; ++i) {
      std::mt19937_64 rng(seed * 1000003 + uint64_t(shape.blocks) * 101 + uint64_t(i));
      const Profile p = random_profile(shape.blocks, shape.micro_batches, rng);
      const Cluster c = random_cluster(shape.devices, p, rng);
      const SearchResult rr = round_robin(p, c, 0);
      const SearchResult gr = greedy(p, c, 0);
      GaOptions o;
      o.seed = seed + uint64_t(i);
      const SearchResult ga = gabra(p, c, 0, o);
      const bool run_exhaustive = exhaustive_candidates(p, c, 0) <= exhaustive_limit;
      SearchResult ex;
      double reference = std::min({rr.simulation.fitness(), gr.simulation.fitness(), ga.simulation.fitness()});
      if (run_exhaustive) {
        ex = exhaustive(p, c, 0, exhaustive_limit);
        reference = ex.simulation.fitness();
      } else {  // best known: a longer GA with other seeds
        GaOptions longer = o;
        longer.population = 128;
        longer.patience = 150;
        longer.generations = 2000;
        for (uint64_t s = 1; s <= 4; ++s) {
          longer.seed = 7919 * s + o.seed;
          reference = std::min(reference, gabra(p, c, 0, longer).simulation.fitness());
        }
      }
      auto cell = [](const SearchResult& r) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.5f%s", r.simulation.iteration_s, r.simulation.fits ? "" : "!");
        return std::string(buf);
      };
      const std::string name =
          std::to_string(shape.blocks) + "x" + std::to_string(shape.devices) + "-" + std::to_string(i);
      std::printf("%-10s %6d %7d %3d %12s %12s %12s %12s %8.3f%% %5s %9.4f %9.4f %9s\n", name.c_str(), shape.blocks,
                  shape.devices, shape.micro_batches, cell(rr).c_str(), cell(gr).c_str(), cell(ga).c_str(),
                  run_exhaustive ? cell(ex).c_str() : "-", 100 * (ga.simulation.fitness() / reference - 1),
                  run_exhaustive ? "opt" : "best", ga.search_s, gr.search_s,
                  run_exhaustive ? std::to_string(ex.search_s).substr(0, 7).c_str() : "-");
      std::fflush(stdout);
    }
  std::printf(
      "times: simulated iteration seconds ('!': exceeds a device's memory); GA gap: "
      "to the exhaustive optimum (opt) or to the best known (best: min of all methods "
      "and 4 longer GA runs)\n");
  return 0;
}
