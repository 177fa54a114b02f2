// GABRA (Akintoye et al., IEEE Access 2022; docs/design.md §7): a genetic algorithm that places a
// network's coarse blocks on the devices of a cluster as a GPipe pipeline, and the baselines
// it is judged against. Every search scores placements with plan::simulate (placement.h).
//
// Chromosome: the cut points and the device of each partition. Fitness: the simulated
// iteration time plus the memory penalty. Tournament selection, crossover, mutation, elitism;
// stops after `patience` generations without improvement (or `generations` in all).
// Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>

#include "plan/placement.h"

namespace gridnn::plan {

struct GaOptions {
  int population = 64;
  int generations = 300;  // at most
  int patience = 40;      // generations without improvement before stopping
  double crossover_rate = 0.9;
  double mutation_rate = 0.2;  // per child
  int tournament = 3;
  int elite = 2;
  uint64_t seed = 1;
};

// `partitions` K: the number of partitions (1 <= K <= min(blocks, devices)); 0 lets the
// search choose K as well.
struct SearchResult {
  std::string method;  // "gabra", "round-robin", "greedy", "exhaustive"
  Placement placement;
  Simulation simulation;
  double search_s = 0;      // wall time the search took
  int64_t evaluations = 0;  // placements simulated
  int generations = 0;      // GA only
};

SearchResult gabra(const Profile& profile, const Cluster& cluster, int partitions,
                   const GaOptions& options = GaOptions());
// Blocks dealt to partitions in equal counts, partition k on device k (partitions == 0:
// min(blocks, devices) partitions).
SearchResult round_robin(const Profile& profile, const Cluster& cluster, int partitions);
// Cuts that balance the partitions' compute time (after sorting the devices by speed, the
// fastest device gets the largest share), then the best device order for those cuts.
SearchResult greedy(const Profile& profile, const Cluster& cluster, int partitions);
// Every cut and every injective device assignment; throws gridnn::Error when there are more
// than `limit` candidates.
SearchResult exhaustive(const Profile& profile, const Cluster& cluster, int partitions, int64_t limit = 50'000'000);
// The number of placements exhaustive() would simulate (saturates at INT64_MAX).
int64_t exhaustive_candidates(const Profile& profile, const Cluster& cluster, int partitions);

}  // namespace gridnn::plan
