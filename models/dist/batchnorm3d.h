// nn::SyncBatchNorm3d: BatchNorm3d with statistics over the whole stage (the BatchNorm3d
// row of DESIGN §4's table). Each rank of the stage holds a depth slab (row axis) of its
// batch shard (col axis); the per-channel sums of BatchNorm3d's two passes and of its
// backward (sum(dy), sum(dy * xhat)) are all-reduced over the stage, so every rank
// normalizes with the statistics of the global batch and volume: outputs, running
// statistics and input gradients are those of the 1 x 1 run (grid invariance).
//
// Communication per training step, over `stage` (labelled comm_label()):
//   forward   all_reduce of the values-per-channel count (1 element, i64) and of the two
//             [2, C] sums tensors (first sum(x), then the shifted sums);
//   backward  all_reduce of the [2, C] sums of dy and dy * xhat.
// Megatron's pairing: the statistics are a reduction of every rank's values, replicated
// back (all_reduce); their gradient is again a reduction (all_reduce) — both directions
// reduce, because each rank's x feeds every rank's output through the statistics.
//
// The count. Each rank knows only its own count (B_c * D_r * H * W differs between ranks
// when the split is uneven, and the last batch of an epoch may be smaller), so it is
// all-reduced: one 8-byte message per forward, a latency term next to the two sums.
// A cheaper scheme would fold it into the first sums message (a [2C + 1] tensor); the
// BatchNorm3d hooks call reduce_count before the first reduce_sums, so that would need a
// change to the base class. Evaluation mode communicates nothing (running statistics).
//
// Parameter gradients (weight, bias) are this rank's shares, added before the sums are
// reduced (see BatchNorm3d::backward); the trainer all-reduces replicated gradients over
// the stage. Buffers (running_mean/var, num_batches_tracked) stay identical on every rank.
#pragma once

#include <string>

#include "models/layers/batchnorm3d.h"
#include "parallel/communicator.h"

namespace gridnn::nn {

class SyncBatchNorm3d : public BatchNorm3d {
 public:
  SyncBatchNorm3d(dist::Communicator& stage, int64_t num_features, double eps = 1e-5,
                  double momentum = 0.1, Device device = Device::cpu());

  const std::string& comm_label() const { return comm_label_; }
  void set_comm_label(std::string label) { comm_label_ = std::move(label); }
  void on_named(const std::string& name) override { set_comm_label(name); }

 protected:
  void reduce_sums(Tensor& sums) override;
  int64_t reduce_count(int64_t local_count) override;

 private:
  dist::Communicator& stage_;
  std::string comm_label_ = "BatchNorm3d";
};

}  // namespace gridnn::nn
