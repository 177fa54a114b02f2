// Pipeline placement (docs/design.md §7): where the coarse blocks of a network run. A network's blocks
// (stem, each residual or attention block, head) are cut into K contiguous partitions, and
// partition k runs on device device[k] (in gridnn-train: the k-th stage's ranks are those of
// stage group device[k]). GPipe schedule: all micro-batch forwards, then all backwards.
//
// This header is the data every placement tool shares: the block profile, the cluster
// description, a placement, the GPipe simulator that scores one, and their JSON files (formats
// in docs/placement.md). The search (GABRA and the baselines) is in plan/gabra.h.
// Pure computation: no MPI, no tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gridnn::plan {

// One coarse block, measured (or given) for one micro-batch on a device of speed 1.
struct BlockProfile {
  std::string name;             // "stem", "layer1.0", "att3", "head"
  double forward_s = 0;         // forward time of one micro-batch
  double backward_s = 0;        // backward time of one micro-batch
  double activation_bytes = 0;  // the block's output for one micro-batch (what crosses a cut;
                                // its gradient crosses back the same size)
  double memory_bytes = 0;      // resident: parameters, gradients, optimizer state
  double stash_bytes = 0;       // kept per micro-batch in flight (activations for backward)
};

struct Profile {
  std::vector<BlockProfile> blocks;
  int micro_batches = 1;  // M
  // GPipe's re-materialization (what gridnn-train's pipeline does): the backward of every
  // micro-batch but the last first re-runs the partition's forward.
  bool recompute = false;
};

struct Device {
  std::string name;
  double speed = 1;         // a block takes its profiled time / speed
  double memory_bytes = 0;  // 0: unlimited
};

// Links between every pair of devices: a message of n bytes from i to j takes
// latency_s[i][j] + n / bandwidth[i][j] (bytes per second). The diagonal is unused.
struct Cluster {
  std::vector<Device> devices;
  std::vector<std::vector<double>> latency_s;
  std::vector<std::vector<double>> bandwidth;
  int size() const { return int(devices.size()); }
};
// n identical devices joined by identical links.
Cluster uniform_cluster(int devices, double latency_s, double bandwidth, double memory_bytes = 0);

// Throw gridnn::Error naming the field that is wrong: a profile needs at least one block,
// distinct non-empty names, times and byte counts >= 0, micro_batches >= 1; a cluster needs at
// least one device, speeds > 0, memory >= 0, D x D matrices with latency >= 0 and bandwidth > 0
// off the diagonal.
void validate(const Profile& profile);
void validate(const Cluster& cluster);

struct Placement {
  // Partition k holds blocks [first_block[k], first_block[k + 1]) (the last one up to the
  // end); first_block[0] == 0, strictly increasing.
  std::vector<int> first_block;
  std::vector<int> device;          // device of each partition, all distinct
  std::vector<std::string> blocks;  // the block names it was made for (checked when non-empty)

  int partitions() const { return int(first_block.size()); }
  int begin(int k) const { return first_block[size_t(k)]; }
  int end(int k, int blocks_total) const { return k + 1 < partitions() ? first_block[size_t(k) + 1] : blocks_total; }
};

// Throws gridnn::Error saying what is wrong: no partition, cuts out of order or out of range,
// an empty partition, a device index out of [0, devices) or used twice, block names that differ
// from `block_names` (when both are given).
void validate(const Placement& p, int blocks_total, int devices, const std::vector<std::string>& block_names = {});

// The simulated GPipe iteration: every micro-batch's forward through the partitions in order,
// then every backward in reverse; a partition runs one micro-batch at a time, forwards in
// order m = 0..M-1 and backwards m = M-1..0; an activation (or its gradient) crosses a cut as
// one message on the link between the two devices. penalty_s is the penalty for the bytes a
// device holds beyond its memory (resident + M x stash).
//
// Exactly (docs/placement.md): partition k takes F_k = sum of its blocks' forward_s / speed per
// micro-batch forward (B_k likewise backward). Forward m on k starts at max(end of k's
// previous operation, arrival of m's activation from k - 1); backward m on k starts at
// max(end of k's previous operation, arrival of m's gradient from k + 1), and the last
// partition starts backward M-1 right after its forward M-1. A message of n bytes (the output
// of the last block before the cut) over link i -> j starts when the sender finished and the
// link's previous message in that direction has left the sender; it occupies the link for
// n / bandwidth[i][j] and arrives latency_s[i][j] + n / bandwidth[i][j] after it started
// (each direction of a link carries one message at a time; compute does not wait for sends).
// Memory penalty, per device over its memory_bytes (0: unlimited):
//   reference_s x (1 + 10 x excess / memory_bytes),
// where reference_s = penalty_reference_s(profile, cluster) bounds every placement's
// iteration time, so any placement that fits beats any that does not.
struct Simulation {
  double iteration_s = 0;                // time of the last backward's end
  double penalty_s = 0;                  // memory penalty (0 when every device fits)
  std::vector<double> partition_busy_s;  // compute time of each partition per iteration
  std::vector<double> partition_memory_bytes;
  bool fits = true;
  double fitness() const { return iteration_s + penalty_s; }  // what the search minimizes
};
Simulation simulate(const Profile& profile, const Cluster& cluster, const Placement& p);
// M x sum(forward_s + backward_s) / slowest speed + 2 M x sum over blocks of (largest latency
// + activation_bytes / smallest bandwidth): an upper bound of any placement's iteration_s.
double penalty_reference_s(const Profile& profile, const Cluster& cluster);

// ---- JSON files (docs/placement.md) ---------------------------------------------------
// Each reader throws gridnn::Error naming the file and the field that is missing or wrong.
Profile read_profile(const std::string& path);
Cluster read_cluster(const std::string& path);
Placement read_placement(const std::string& path);
std::string profile_json(const Profile& profile);
std::string cluster_json(const Cluster& cluster);
std::string placement_json(const Placement& p);
// The same, plus the informative "simulated_iteration_s", "penalty_s" and "fits" of `s`.
std::string placement_json(const Placement& p, const Simulation& s);
// Writes text to path (atomically: a temporary file renamed into place).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace gridnn::plan
