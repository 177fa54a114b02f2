// Where a network gets its layers: the single-process layers here, the domain- and
// batch-parallel ones of models/dist/ for a process grid (docs/design.md §4). A network built
// through a factory reads the same on one process and on a grid; parameter names do not
// change, so checkpoints and PyTorch weights fit either.
//
// `in_depth` is the layer's global input depth (the whole volume's, not a slab's): a
// domain-parallel layer splits it over the grid's rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/batchnorm.h"
#include "models/layers/module.h"

namespace gridnn::nn {

class LayerFactory {
 public:
  virtual ~LayerFactory() = default;
  // input_gradient = false: backward need not compute dx (the network's first layer).
  virtual std::unique_ptr<Module> conv3d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                         bool bias, int64_t in_depth, bool input_gradient = true) const;
  // depth: the (global) depth of the activation it normalizes; activation relu: the ReLU
  // after it, fused (nn::BatchNorm3d).
  virtual std::unique_ptr<Module> batchnorm3d(int64_t channels, int64_t depth,
                                              ops::BnActivation activation = ops::BnActivation::none) const;
  virtual std::unique_ptr<Module> maxpool3d(int64_t kernel, int64_t stride, int64_t padding, int64_t in_depth) const;
  // Self-attention over depth x height x width positions.
  virtual std::unique_ptr<Module> attention(int64_t channels, int64_t depth) const;
  // [B, C, D, H, W] -> [B, C] over `positions` = D * H * W (global) positions; the features
  // are replicated from here on.
  virtual std::unique_ptr<Module> global_avg_pool(int64_t positions, int64_t depth) const;
  // On the replicated features.
  virtual std::unique_ptr<Module> linear(int64_t in, int64_t out) const;
  // For a network that needs each sample whole (an MLP on volumes): the module that turns
  // this rank's part of the input into the whole volume; null where it holds it already.
  virtual std::unique_ptr<Module> whole_volume(int64_t /*depth*/) const { return nullptr; }
  // Called by a network at the input of each of its blocks (models/nets/blocks.h), in order,
  // before it makes the block's layers; `depth`: the input's global depth; input_gradient =
  // false: backward need not give the block's input a gradient (the network's input). Where
  // the activation's distribution changes there (a grid's switch to the batch split): the
  // module that changes it, and the factory of the layers from there on; else neither.
  struct BlockInput {
    std::unique_ptr<Module> module;
    const LayerFactory* layers = nullptr;  // null: this one
  };
  virtual BlockInput block_input(const std::string& /*block*/, int64_t /*depth*/,
                                 bool /*input_gradient*/ = true) const {
    return {};
  }
};

// The output depth of a convolution or pooling window along depth.
inline int64_t window_output_depth(int64_t in_depth, int64_t kernel, int64_t stride, int64_t padding) {
  return (in_depth + 2 * padding - kernel) / stride + 1;
}

}  // namespace gridnn::nn
