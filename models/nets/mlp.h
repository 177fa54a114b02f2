// MLP (the paper's fully connected setting): the input flattened to [B, features], then
// fc1, ReLU, fc2, ReLU, ..., fcK (no ReLU after the last). Names "fc1.weight", "fc1.bias", ...
#pragma once

#include <cstdint>
#include <vector>

#include "models/layers/activation.h"
#include "models/nets/blocks.h"
#include "models/nets/layer_factory.h"

namespace gridnn::nn {

struct MlpConfig {
  // Layer sizes from the input features to the classes: {in, hidden..., classes}, at least
  // two entries.
  std::vector<int64_t> sizes;
  // The input's depth (for a grid's factory, which may hand this rank a depth slab).
  int64_t input_depth = 1;
};

// Blocks (pipeline stages, models/nets/blocks.h): "fc1" (with the input's gather and flatten
// and its ReLU), "fc2", ..., "fcK".
class Mlp : public Module, public BlockNetwork {
 public:
  // Layers from `layers` (a grid's: the input volume gathered whole first, the Linear
  // layers on replicated features).
  explicit Mlp(const MlpConfig& config, const LayerFactory& layers = LayerFactory());

  Tensor forward(const Tensor& input) override;  // [B, ...] with in features -> [B, classes]
  // The input's gather (on a grid), then fc1..fcK; the first layer's input gradient is not
  // needed (its input is data), which the paper's strategies take into account.
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  const MlpConfig& config() const { return config_; }

  const std::vector<BlockInfo>& blocks() const override { return blocks_; }
  Tensor forward_block(size_t i, const Tensor& input) override;
  Tensor backward_block(size_t i, Tensor dy) override;
  Shape describe_block(size_t i, const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dlogits) override;
  void drop_saved() override {
    for (ReLU& r : relus_) r.release_saved();
  }

  MlpConfig config_;
  std::vector<BlockInfo> blocks_;
  std::unique_ptr<Module> whole_;  // null: the input is whole already
  Flatten flatten_;
  std::vector<Module*> fcs_;
  std::vector<ReLU> relus_;  // one after each fc but the last
};

}  // namespace gridnn::nn
