// nn::SyncBatchNorm3d: BatchNorm3d with statistics over the whole stage (the BatchNorm3d
// row of DESIGN §4's table). Each rank of the stage holds a depth slab (row axis) of its
// batch shard (col axis); the per-channel sums of BatchNorm3d's two passes and of its
// backward (sum(dy), sum(dy * xhat)) are all-reduced over the stage, so every rank
// normalizes with the statistics of the global batch and volume: outputs, running
// statistics and input gradients are those of the 1 x 1 run (grid invariance).
//
// Communication per training step, over `stage` (labelled comm_label()), three all-reduces:
//   forward   [C + 3]: sum(x) per channel and the values-per-channel count, in one message;
//             then the [2, C] shifted sums of the second pass;
//   backward  the [2, C] sums of dy and dy * xhat.
// Megatron's pairing: the statistics are a reduction of every rank's values, replicated
// back (all_reduce); their gradient is again a reduction (all_reduce) — both directions
// reduce, because each rank's x feeds every rank's output through the statistics.
//
// The count. Each rank knows only its own count (B_c * D_r * H * W differs between ranks
// when the split is uneven, and the last batch of an epoch may be smaller), so it travels
// with the first sums as three base-4096 digits, each a float: every partial sum of digits
// stays below 2^24 for stages of up to 4096 ranks, so the float sums are exact integers in
// any order and the count is exact (up to 2^36 values per channel and rank). Evaluation
// mode communicates nothing (running statistics).
//
// Parameter gradients (weight, bias) are this rank's shares, added before the sums are
// reduced (see BatchNorm3d::backward); the trainer all-reduces replicated gradients over
// the stage. Buffers (running_mean/var, num_batches_tracked) stay identical on every rank.
#pragma once

#include <array>
#include <string>

#include "models/layers/batchnorm3d.h"
#include "parallel/communicator.h"

namespace gridnn::nn {

class SyncBatchNorm3d : public BatchNorm3d {
 public:
  SyncBatchNorm3d(parallel::Communicator& stage, int64_t num_features, double eps = 1e-5,
                  double momentum = 0.1, Device device = Device::cpu());

  const std::string& comm_label() const { return comm_label_; }
  void set_comm_label(std::string label) { comm_label_ = std::move(label); }
  void on_named(const std::string& name) override { set_comm_label(name); }

 protected:
  int64_t reduce_mean_sums(Tensor& sums, int64_t local_count) override;
  void reduce_sums(Tensor& sums) override;

 private:
  parallel::Communicator& stage_;
  std::string comm_label_ = "BatchNorm3d";
};

// The count's digits (see above): count = d[0] + 4096 d[1] + 4096^2 d[2]; the sum of up to
// kMaxCountRanks ranks' digits, added as floats, decodes to the sum of their counts.
constexpr int64_t kCountDigitBase = 4096, kMaxCountRanks = 4096;
std::array<float, 3> count_digits(int64_t count);
int64_t count_from_digits(const float* digits);

}  // namespace gridnn::nn
