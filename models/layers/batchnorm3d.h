// nn::BatchNorm3d: batch normalization over [N, C, D, H, W], exactly PyTorch's
// torch.nn.BatchNorm3d(C, eps, momentum) with affine and tracked running statistics.
//
// Parameters "weight" (ones) and "bias" (zeros), [C]; buffers "running_mean" (zeros),
// "running_var" (ones), [C], and "num_batches_tracked" (i64 scalar, shape []).
// Training: normalize with this batch's mean and BIASED variance over N*D*H*W values per
// channel; running_mean/var += momentum * (batch - running) with the UNBIASED variance;
// num_batches_tracked += 1. Evaluation: normalize with the running statistics.
//
// The statistics are computed in the steps of kernels/batchnorm.h: per-channel sums
// (double accumulation, two-pass variance: first sum(x), then the sums of x - mean and its
// square), then moments, normalize.
//
// Distribution (docs/design.md §4). Given `statistics_over`, a communicator whose ranks
// hold different values of the same channels (depth slabs over the stage, batch shards over
// col), the statistics are those of all its ranks' values: the per-channel sums of the two
// forward passes and of backward are all-reduced over it (the all-reduce <-> all-reduce pair
// of parallel/mappings.h: each rank's x feeds every rank's output through the statistics),
// so outputs, running statistics and input gradients are those of one process holding all
// the values. Three all-reduces per training step, labelled with the layer's name:
//   forward   [C + 3]: sum(x) and this rank's values-per-channel count in one message (the
//             count as three base-4096 digits in floats, below); then the [2, C] sums of
//             the second pass
//   backward  the [2, C] sums of dy and dy * xhat
// The weight and bias gradients are this rank's shares (added before the sums are reduced)
// and are summed over the same communicator after backward (their layout's grad_sum_over).
// Evaluation mode communicates nothing (running statistics).
//
// The count. Each rank knows only its own count (B_c * D_r * H * W differs between ranks
// when the split is uneven, and the last batch of an epoch may be smaller), so it travels
// with the first sums as three base-4096 digits, each a float: every partial sum of digits
// stays below 2^24 for groups of up to 4096 ranks, so the float sums are exact integers in
// any order and the count is exact (up to 2^36 values per channel and rank).
#pragma once

#include <array>

#include "models/module.h"

namespace gridnn::nn {

class BatchNorm3d : public Module {
 public:
  explicit BatchNorm3d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       Device device = Device::cpu(), parallel::Communicator* statistics_over = nullptr);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  int64_t num_features() const { return channels_; }
  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }
  Tensor& num_batches_tracked() { return *num_batches_tracked_; }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;
  void on_device_change(const Device& device) override;

 private:
  void check_input(const Tensor& x) const;
  // The first pass's sums[0] = sum(x) reduced over statistics_over with the count of values
  // per channel (this rank's `local_count`): returns the count over all its ranks.
  int64_t reduce_mean_sums(Tensor& sums, int64_t local_count);
  // The [2, C] sums of the second pass or of backward, reduced over statistics_over.
  void reduce_sums(Tensor& sums);

  parallel::Communicator* statistics_over_;
  int64_t channels_;
  double eps_, momentum_;
  Parameter* weight_;
  Parameter* bias_;
  Tensor* running_mean_;
  Tensor* running_var_;
  Tensor* num_batches_tracked_;

  // Kept by forward for backward.
  Tensor input_;
  Tensor mean_, var_, invstd_;     // [C]: the statistics the last forward normalized with
  Tensor sums_;                    // [2, C] scratch
  int64_t count_ = 0;              // values per channel behind mean_ (global)
  bool batch_statistics_ = false;  // the last forward was in training mode
};

// The count's digits (see above): count = d[0] + 4096 d[1] + 4096^2 d[2]; the sum of up to
// kMaxCountRanks ranks' digits, added as floats, decodes to the sum of their counts.
constexpr int64_t kCountDigitBase = 4096, kMaxCountRanks = 4096;
std::array<float, 3> count_digits(int64_t count);
int64_t count_from_digits(const float* digits);

}  // namespace gridnn::nn
