// 3D-ResAttNet (DESIGN §5): a 3D ResNet-18/34 with self-attention after layer3 and/or
// layer4, for classifying volumes (the seeds' use case: Alzheimer's disease from MRI).
//
//   conv1 (k7 s2 p3) - bn1 - ReLU - maxpool (k3 s2 p1)
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
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"

namespace gridnn::nn {

struct ResAttNetConfig {
  int depth = 18;            // 18 or 34
  int64_t width = 16;        // w: channels of layer1 (attention needs 4w divisible by 8)
  int64_t in_channels = 1;
  int64_t classes = 2;
  bool attention3 = true;    // att3 after layer3
  bool attention4 = true;    // att4 after layer4
};

// Checks a configuration (depth 18/34, positive sizes, widths the attention can split);
// throws gridnn::Error saying what to change.
void validate(const ResAttNetConfig& config);
// "ResAttNet3D-18, width 16, 1 -> 2 classes, attention after layer3 and layer4"
std::string describe(const ResAttNetConfig& config);

// out = ReLU(bn2(conv2(ReLU(bn1(conv1(x))))) + shortcut(x)); shortcut = downsample (1x1x1
// conv with the block's stride, then BN) when the shape changes, else the identity.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Conv3d* conv1_;
  BatchNorm3d* bn1_;
  Conv3d* conv2_;
  BatchNorm3d* bn2_;
  Sequential* downsample_ = nullptr;  // null: identity shortcut
  ReLU relu1_, relu_out_;
};

class ResAttNet3D : public Module {
 public:
  explicit ResAttNet3D(const ResAttNetConfig& config);

  Tensor forward(const Tensor& x) override;   // [B, in, D, H, W] -> logits [B, classes]
  // Returns dL/dx only after set_input_gradient(true); by default the input is data and
  // its gradient (the stem's backward-data, ~10% of a step) is not computed.
  Tensor backward(const Tensor& dlogits) override;
  void set_input_gradient(bool needed) { conv1_->set_input_gradient(needed); }

  const ResAttNetConfig& config() const { return config_; }

 private:
  ResAttNetConfig config_;
  // Registered in PyTorch's state_dict order; the parameter-free layers are plain members.
  Conv3d* conv1_;
  BatchNorm3d* bn1_;
  ReLU relu_;
  MaxPool3d maxpool_{3, 2, 1};
  std::array<Sequential*, 4> layers_{};
  SelfAttention3d* att3_ = nullptr;
  SelfAttention3d* att4_ = nullptr;
  GlobalAvgPool3d avgpool_;
  Linear* fc_;
};

}  // namespace gridnn::nn
