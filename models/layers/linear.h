// Linear (fully connected) layer: y = x W^T + b for x [N, in], as torch.nn.Linear.
#pragma once

#include <cstdint>

#include "models/layers/module.h"

namespace gridnn::nn {

// Parameters "weight" [out, in] and "bias" [out] (when bias = true), initialized as
// PyTorch does: uniform(-1/sqrt(in), 1/sqrt(in)) for both (kaiming_uniform with
// a = sqrt(5) for the weight). Forward keeps x for the weight gradient. The three GEMMs
// (x W^T, dy W, dy^T x) run in the module's math_mode(); the bias stays fp32.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;  // x [N, in] -> [N, out]
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }  // null without bias

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  void drop_saved() override { input_ = Tensor(); }
  Tensor do_backward(const Tensor& dy) override;  // dy [N, out] -> dx [N, in]; dW += dy^T x, db += sum_n dy

  std::string label() const;  // "Linear(in, out)"

  int64_t in_, out_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  Tensor input_;
};

}  // namespace gridnn::nn
