// 3D-ResAttNet (docs/design.md §5): a 3D ResNet-18/34 with self-attention after layer3 and/or
// layer4, for classifying volumes (the seeds' use case: Alzheimer's disease from MRI).
//
//   conv1 (k7 s2 p3) - bn1 - ReLU (fused into bn1) - maxpool (k3 s2 p1)
//   layer1..layer4: BasicBlocks of widths w, 2w, 4w, 8w, strides 1, 2, 2, 2,
//                   [2,2,2,2] blocks (depth 18) or [3,4,6,3] (depth 34)
//   att3 (optional) after layer3, att4 (optional) after layer4: SelfAttention3d
//   global average pool - fc (8w -> classes)
//
// Parameter and buffer names are those of the PyTorch module in test/parity/torch_modules.py
// (torchvision's ResNet names: "layer2.0.downsample.1.running_var", "att3.query.weight"), so
// weights move both ways through safetensors.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "models/layers/activation.h"
#include "models/nets/blocks.h"
#include "models/nets/layer_factory.h"

namespace gridnn::nn {

struct ResAttNetConfig {
  int depth = 18;      // 18 or 34
  int64_t width = 16;  // w: channels of layer1 (attention needs 4w divisible by 8)
  int64_t in_channels = 1;
  int64_t classes = 2;
  bool attention3 = true;  // att3 after layer3
  bool attention4 = true;  // att4 after layer4
  // The input volume D, H, W: needed by domain-parallel layers (a grid's LayerFactory), which
  // split every activation's depth; the single-process layers ignore it.
  std::array<int64_t, 3> input_size{32, 32, 32};
  // Whether backward returns dL/dinput. Off by default: the input is data, and skipping the
  // stem's backward-data saves ~10% of a step (PyTorch skips it as well).
  bool input_gradient = false;
};

// Checks a configuration (depth 18/34, positive sizes, widths the attention can split);
// throws gridnn::Error saying what to change.
void validate(const ResAttNetConfig& config);
// "ResAttNet3D-18, width 16, 1 -> 2 classes, attention after layer3 and layer4"
std::string describe(const ResAttNetConfig& config);

// out = ReLU(bn2(conv2(ReLU(bn1(conv1(x))))) + shortcut(x)); shortcut = downsample (1x1x1
// conv with the block's stride, then BN) when the shape changes, else the identity. bn1 has
// its ReLU fused (nn::BatchNorm3d).
class BasicBlock : public Module {
 public:
  // in_depth: the global depth of the block's input (for domain-parallel layers).
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t in_depth = 0,
             const LayerFactory& layers = LayerFactory());

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;
  void drop_saved() override { relu_out_.release_saved(); }
  // A fork, branch or join of the memory model (plan/memory_model.h) named after the block.
  plan::LayerMemory structure(plan::LayerMemory::Op op) const;

  Module* conv1_;
  Module* bn1_;
  Module* conv2_;
  Module* bn2_;
  Sequential* downsample_ = nullptr;  // null: identity shortcut
  ReLU relu_out_;
};

// Blocks (for pipeline stages, models/nets/blocks.h): "stem" (conv1, bn1, ReLU, maxpool),
// "layerL.i" for each residual block, "att3" and "att4", "head" (global pool and fc).
class ResAttNet3D : public Module, public BlockNetwork {
 public:
  // Layers from `layers`: the single-process ones by default, a grid's for domain and
  // batch parallelism (models/dist/).
  explicit ResAttNet3D(const ResAttNetConfig& config, const LayerFactory& layers = LayerFactory());

  Tensor forward(const Tensor& x) override;  // [B, in, D, H, W] -> logits [B, classes]

  const ResAttNetConfig& config() const { return config_; }

  const std::vector<BlockInfo>& blocks() const override { return blocks_; }
  Tensor forward_block(size_t i, const Tensor& x) override;
  Tensor backward_block(size_t i, Tensor dy) override;
  Shape describe_block(size_t i, const Shape& input, plan::RankStep& step) const override;
  bool recomputable(size_t i) const override;  // the stem, residual and attention blocks
  void release_block(size_t i) override;       // any block
  // Its blocks in order, each as forward_block runs it.
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  // dL/dx with config.input_gradient, else an undefined tensor.
  Tensor do_backward(const Tensor& dlogits) override;

  // forward_block and backward_block without the distribution switch at the block's input.
  Tensor forward_block_layers(size_t i, const Tensor& x);
  Tensor backward_block_layers(size_t i, Tensor dy);

  enum class Part { stem, residual, attention, head };
  void add_block(std::string name, Part part, Module* module, std::array<int64_t, 3> output_size = {0, 0, 0});

  ResAttNetConfig config_;
  std::vector<BlockInfo> blocks_;
  std::vector<std::pair<Part, Module*>> block_parts_;  // per block: its kind and module
  // Registered in PyTorch's state_dict order (torchvision's ResNet registers its pooling
  // layers too; they have no state). bn1 has the stem's ReLU fused.
  Module* conv1_;
  Module* bn1_;
  Module* maxpool_;
  Module* att3_ = nullptr;
  Module* att4_ = nullptr;
  Module* avgpool_;
  Module* fc_;
  // Where the layers' distribution changes (LayerFactory::block_input): at the input of
  // block split_block_, none when null.
  Module* split_ = nullptr;
  size_t split_block_ = 0;
};

}  // namespace gridnn::nn
