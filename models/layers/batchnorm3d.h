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
// square), then moments, normalize. A distributed layer (DESIGN §4) overrides the two
// hooks below to all-reduce the sums and the count over the stage; nothing else changes.
#pragma once

#include "models/module.h"

namespace gridnn::nn {

class BatchNorm3d : public Module {
 public:
  explicit BatchNorm3d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

  int64_t num_features() const { return channels_; }
  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }
  Tensor& num_batches_tracked() { return *num_batches_tracked_; }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;
  void on_device_change(const Device& device) override;

  // Distribution hooks, identities here; a distributed layer all-reduces over the stage.
  // reduce_mean_sums: the first statistics pass, sums[0] = sum(x) per channel (sums[1] is
  // not used), with this rank's number of values per channel; reduces sums[0] and returns
  // the count over the whole (global) batch — one message for both.
  // reduce_sums: the [2, C] sums of the second pass (x - mean and its square) and of
  // backward (sum(dy), sum(dy * xhat)), before they are used.
  virtual int64_t reduce_mean_sums(Tensor& /*sums*/, int64_t local_count) { return local_count; }
  virtual void reduce_sums(Tensor& /*sums*/) {}

 private:
  void check_input(const Tensor& x) const;

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
