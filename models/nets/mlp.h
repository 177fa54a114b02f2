// MLP (the paper's fully connected setting): the input flattened to [B, features], then
// fc1, ReLU, fc2, ReLU, ..., fcK (no ReLU after the last). Names "fc1.weight", "fc1.bias", ...
#pragma once

#include <cstdint>
#include <vector>

#include "models/layers/activation.h"
#include "models/layers/linear.h"

namespace gridnn::nn {

struct MlpConfig {
  // Layer sizes from the input features to the classes: {in, hidden..., classes}, at least
  // two entries.
  std::vector<int64_t> sizes;
};

class Mlp : public Module {
 public:
  explicit Mlp(const MlpConfig& config);

  Tensor forward(const Tensor& x) override;    // [B, ...] with in features -> [B, classes]
  Tensor backward(const Tensor& dlogits) override;

  const MlpConfig& config() const { return config_; }

 private:
  MlpConfig config_;
  Flatten flatten_;
  std::vector<Linear*> fcs_;
  std::vector<ReLU> relus_;  // one after each fc but the last
};

}  // namespace gridnn::nn
