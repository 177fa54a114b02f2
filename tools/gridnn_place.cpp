// gridnn-place: where the coarse blocks of a network run as GPipe partitions (docs/design.md §7).
// Reads a block profile and a cluster description (JSON), runs GABRA and the baselines
// (round-robin, greedy balanced cuts, exhaustive search when it is small enough), prints each
// one's simulated iteration time, and writes GABRA's placement (formats: docs/placement.md).
//
//   gridnn-place --example-profile profile.json --example-cluster cluster.json
//   gridnn-place --profile profile.json --cluster cluster.json --partitions 4 --out place.json
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/gabra.h"
#include "tools/cli.h"

namespace {

using namespace gridnn::plan;

// A ResAttNet3D-18-like network (width 32, 64^3 input, micro-batch 4, fp32) on a speed-1 GPU:
// times in seconds, sizes in bytes.
Profile example_profile() {
  Profile p;
  p.micro_batches = 8;
  const double mb = 1 << 20;
  //            name        fwd      bwd      activation  resident   stash
  p.blocks = {{"stem", 0.0040, 0.0080, 64.0 * mb, 0.1 * mb, 160.0 * mb},
              {"layer1.0", 0.0060, 0.0120, 32.0 * mb, 1.0 * mb, 96.0 * mb},
              {"layer1.1", 0.0060, 0.0120, 32.0 * mb, 1.0 * mb, 96.0 * mb},
              {"layer2.0", 0.0050, 0.0100, 8.0 * mb, 3.4 * mb, 40.0 * mb},
              {"layer2.1", 0.0045, 0.0090, 8.0 * mb, 4.5 * mb, 24.0 * mb},
              {"layer3.0", 0.0045, 0.0090, 2.0 * mb, 13.5 * mb, 10.0 * mb},
              {"layer3.1", 0.0045, 0.0090, 2.0 * mb, 18.0 * mb, 6.0 * mb},
              {"att3", 0.0080, 0.0160, 2.0 * mb, 4.5 * mb, 40.0 * mb},
              {"layer4.0", 0.0045, 0.0090, 0.5 * mb, 54.0 * mb, 2.5 * mb},
              {"layer4.1", 0.0045, 0.0090, 0.5 * mb, 72.0 * mb, 1.5 * mb},
              {"att4", 0.0020, 0.0040, 0.5 * mb, 18.0 * mb, 3.0 * mb},
              {"head", 0.0002, 0.0004, 0.0001 * mb, 0.1 * mb, 0.5 * mb}};
  return p;
}

// Two nodes: a fast and a mid GPU joined by NVLink on node 0, a mid and a small old GPU on
// node 1 (PCIe), 12.5 GB/s between the nodes.
Cluster example_cluster() {
  Cluster c;
  const double gb = 1e9;
  c.devices = {{"node0-gpu0-fast", 2.0, 16 * gb},
               {"node0-gpu1", 1.0, 8 * gb},
               {"node1-gpu0", 1.0, 8 * gb},
               {"node1-gpu1-small", 0.5, 1.5 * gb}};
  c.latency_s = {{0, 2e-6, 10e-6, 10e-6}, {2e-6, 0, 10e-6, 10e-6}, {10e-6, 10e-6, 0, 5e-6}, {10e-6, 10e-6, 5e-6, 0}};
  c.bandwidth = {{0, 100 * gb, 12.5 * gb, 12.5 * gb},
                 {100 * gb, 0, 12.5 * gb, 12.5 * gb},
                 {12.5 * gb, 12.5 * gb, 0, 16 * gb},
                 {12.5 * gb, 12.5 * gb, 16 * gb, 0}};
  return c;
}

std::string describe(const Placement& p, const Cluster& cluster) {
  std::string s;
  const int n = int(p.blocks.size());
  for (int k = 0; k < p.partitions(); ++k) {
    if (k) s += " | ";
    s += std::to_string(p.end(k, n) - p.begin(k)) + "@" + cluster.devices[size_t(p.device[size_t(k)])].name;
  }
  return s;
}

void print_table(const std::vector<SearchResult>& results, const Cluster& cluster, const SearchResult* optimum) {
  std::printf("%-12s %-13s %10s %5s %9s %10s %11s  %s\n", "method", "iteration s", "penalty s", "fits", "gap",
              "search s", "evaluations", "partitions (blocks@device)");
  for (const SearchResult& r : results) {
    std::string gap = "-";
    if (optimum) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%+.3f%%", 100 * (r.simulation.fitness() / optimum->simulation.fitness() - 1));
      gap = buf;
    }
    std::printf("%-12s %-13.6g %10.4g %5s %9s %10.4f %11lld  %s\n", r.method.c_str(), r.simulation.iteration_s,
                r.simulation.penalty_s, r.simulation.fits ? "yes" : "NO", gap.c_str(), r.search_s,
                static_cast<long long>(r.evaluations), describe(r.placement, cluster).c_str());
  }
}

void print_json(const std::vector<SearchResult>& results, const SearchResult* optimum) {
  std::printf("{\"results\": [");
  for (size_t i = 0; i < results.size(); ++i) {
    const SearchResult& r = results[i];
    std::printf(
        "%s\n  {\"method\": \"%s\", \"simulated_iteration_s\": %.9g, \"penalty_s\": %.9g, "
        "\"fits\": %s, \"search_s\": %.6g, \"evaluations\": %lld, \"generations\": %d, "
        "\"gap_to_optimum\": ",
        i ? "," : "", r.method.c_str(), r.simulation.iteration_s, r.simulation.penalty_s,
        r.simulation.fits ? "true" : "false", r.search_s, static_cast<long long>(r.evaluations), r.generations);
    if (optimum)
      std::printf("%.9g", r.simulation.fitness() / optimum->simulation.fitness() - 1);
    else
      std::printf("null");
    std::printf(", \"partitions\": [");
    for (int k = 0; k < r.placement.partitions(); ++k)
      std::printf("%s{\"device\": %d, \"first_block\": %d}", k ? ", " : "", r.placement.device[size_t(k)],
                  r.placement.first_block[size_t(k)]);
    std::printf("]}");
  }
  std::printf("\n]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gridnn-place: GABRA pipeline placement of a network's blocks on a cluster, "
      "compared with round-robin, greedy and exhaustive placement (docs/design.md section 7; "
      "file formats: docs/placement.md)"};
  std::string profile_path, cluster_path, out_path, example_profile_path, example_cluster_path;
  int partitions = 0, micro_batches = 0;
  int64_t exhaustive_limit = 2'000'000;
  bool no_baselines = false, json = false;
  GaOptions ga;
  app.add_option("--profile", profile_path, "block profile (JSON)");
  app.add_option("--cluster", cluster_path, "cluster description (JSON)");
  app.add_option("--partitions", partitions, "number of partitions K (0: the search chooses K too)")
      ->capture_default_str();
  app.add_option("--micro-batches", micro_batches, "micro-batches M (overrides the profile's)");
  app.add_option("--population", ga.population, "GA population")->capture_default_str();
  app.add_option("--generations", ga.generations, "GA generations at most")->capture_default_str();
  app.add_option("--patience", ga.patience,
                 "stop after this many generations without "
                 "improvement")
      ->capture_default_str();
  app.add_option("--crossover", ga.crossover_rate, "crossover rate")->capture_default_str();
  app.add_option("--mutation", ga.mutation_rate, "mutation rate per child")->capture_default_str();
  app.add_option("--tournament", ga.tournament, "tournament size")->capture_default_str();
  app.add_option("--elite", ga.elite, "individuals kept as they are")->capture_default_str();
  app.add_option("--seed", ga.seed, "GA seed")->capture_default_str();
  app.add_flag("--no-baselines", no_baselines, "run the GA only");
  app.add_option("--exhaustive-limit", exhaustive_limit,
                 "run exhaustive search when it has at most this many candidates")
      ->capture_default_str();
  app.add_option("--out", out_path, "write GABRA's placement here (JSON)");
  app.add_flag("--json", json, "JSON output");
  app.add_option("--example-profile", example_profile_path,
                 "write a sample profile (ResAttNet3D-18-like) to this file");
  app.add_option("--example-cluster", example_cluster_path,
                 "write a sample 4-device heterogeneous cluster to this file");
  CLI11_PARSE(app, argc, argv);

  return gridnn::cli::run_program("gridnn-place", [&] {
    if (!example_profile_path.empty()) write_text_file(example_profile_path, profile_json(example_profile()));
    if (!example_cluster_path.empty()) write_text_file(example_cluster_path, cluster_json(example_cluster()));
    const bool wrote_examples = !example_profile_path.empty() || !example_cluster_path.empty();
    if (profile_path.empty() && cluster_path.empty() && wrote_examples) return 0;
    if (profile_path.empty() || cluster_path.empty())
      throw gridnn::Error(
          "give both --profile and --cluster (or --example-profile / "
          "--example-cluster to write sample inputs)");
    Profile profile = read_profile(profile_path);
    const Cluster cluster = read_cluster(cluster_path);
    if (micro_batches != 0) {
      if (micro_batches < 1) throw gridnn::Error("--micro-batches must be >= 1");
      profile.micro_batches = micro_batches;
    }

    std::vector<SearchResult> results{gabra(profile, cluster, partitions, ga)};
    const SearchResult* optimum = nullptr;
    if (!no_baselines) {
      results.push_back(round_robin(profile, cluster, partitions));
      results.push_back(greedy(profile, cluster, partitions));
      if (exhaustive_candidates(profile, cluster, partitions) <= exhaustive_limit) {
        results.push_back(exhaustive(profile, cluster, partitions, exhaustive_limit));
        optimum = &results.back();
      }
    }
    if (!out_path.empty()) write_text_file(out_path, placement_json(results[0].placement, results[0].simulation));
    if (json) {
      print_json(results, optimum);
      return 0;
    }
    std::printf(
        "%zu blocks, %d devices, M = %d micro-batches, K = %s; GA: population %d, "
        "seed %llu, %d generations\n",
        profile.blocks.size(), cluster.size(), profile.micro_batches,
        partitions ? std::to_string(partitions).c_str() : "searched", ga.population,
        static_cast<unsigned long long>(ga.seed), results[0].generations);
    print_table(results, cluster, optimum);
    if (!no_baselines && !optimum)
      std::printf("(exhaustive search skipped: %lld candidates > --exhaustive-limit %lld)\n",
                  static_cast<long long>(exhaustive_candidates(profile, cluster, partitions)),
                  static_cast<long long>(exhaustive_limit));
    if (!out_path.empty()) std::printf("wrote %s\n", out_path.c_str());
    return 0;
  });
}
