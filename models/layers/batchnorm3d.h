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
// the values. Per training step, labelled with the layer's name:
//   forward   this rank's values-per-channel count, all-reduced as one i64 host tensor;
//             then [C] sum(x); then the [2, C] sums of the second pass
//   backward  the [2, C] sums of dy and dy * xhat
// The weight and bias gradients are this rank's shares (added before the sums are reduced)
// and are summed over the same communicator after backward (their layout's grad_sum_over).
// Evaluation mode communicates nothing (running statistics).
//
// Fused ReLU. With `activation` relu the layer is batch norm and the ReLU after it in one
// pass, bit for bit the two layers (kernels/batchnorm_bodies.h): it keeps only x, and its
// backward gates dy by the sign of bn(x), recomputed from x, where the two layers would keep
// x and bn(x).
//
// In-place gradient. dx is an element-wise function of dy once the sums are taken, so when
// the caller gives dy up (passes it to backward with std::move and holds no other handle),
// dx is written over it; the container that does so states it in describe
// (LayerMemory::grad_in_place).
//
// The count. Each rank knows only its own count (B_c * D_r * H * W differs between ranks
// when the split is uneven, and the last batch of an epoch may be smaller), and the kernels
// take the total on the host. It is all-reduced as a host tensor: over MPI directly, and on
// an NCCL communicator through its host (MPI) side, so the GPU never waits for it and nothing
// is read back from the device (docs/design.md §2: a step reads nothing back). The sums stay
// on the device.
#pragma once

#include "kernels/batchnorm.h"
#include "models/layers/module.h"

namespace gridnn::nn {

class BatchNorm3d : public Module {
 public:
  explicit BatchNorm3d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, Device device = Device::cpu(),
                       parallel::Communicator* statistics_over = nullptr,
                       ops::BnActivation activation = ops::BnActivation::none);

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  int64_t num_features() const { return channels_; }
  ops::BnActivation activation() const { return activation_; }
  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }
  Tensor& num_batches_tracked() { return *num_batches_tracked_; }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;
  void on_device_change(const Device& device) override;

 private:
  void drop_saved() override { input_ = Tensor(); }
  Tensor do_backward(const Tensor& dy) override;

  void check_input(const Tensor& x) const;
  // The count of values per channel over statistics_over's ranks (this rank's: `local_count`).
  int64_t reduce_count(int64_t local_count);
  // Sums (sum(x) of the first pass, the [2, C] sums of the second pass or of backward),
  // reduced over statistics_over.
  void reduce_sums(Tensor& sums);

  parallel::Communicator* statistics_over_;
  ops::BnActivation activation_;
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

}  // namespace gridnn::nn
