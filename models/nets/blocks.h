// A network as a chain of coarse blocks (docs/design.md §7): the places where pipeline stages may cut
// it. ResAttNet3D's blocks are the stem, each residual block, each attention block and the
// head; the MLP's are its fully connected layers. The network's own forward and backward run
// the same blocks in order, so a pipelined run computes exactly what the whole network does.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "plan/cost_model.h"

namespace gridnn::nn {

struct BlockInfo {
  std::string name;                   // "stem", "layer2.1", "att3", "head", "fc2"
  std::vector<std::string> prefixes;  // state_dict prefixes of its tensors ("layer2.1.", "fc.")
  // The global {D, H, W} of the block's output when it is a volume [B, C, D, H, W] (what
  // Grad-CAM can explain); zeros when it is not (the head, fully connected blocks).
  std::array<int64_t, 3> output_size{0, 0, 0};
};

class BlockNetwork {
 public:
  virtual ~BlockNetwork() = default;

  virtual const std::vector<BlockInfo>& blocks() const = 0;
  // Block i's forward on the previous block's output (block 0: the network's input).
  virtual Tensor forward_block(size_t i, const Tensor& x) = 0;
  // Block i's backward for its last forward, each module's through Module::backward (which
  // reports it to the backward observer). Block 0 returns dL/dinput only when the network
  // computes it. dy is taken by value, as Module::backward takes it: given up, it is freed
  // once the block's first module has used it.
  virtual Tensor backward_block(size_t i, Tensor dy) = 0;
  // Block i's layers and collectives as forward_block runs them (nn::Module::describe), on an
  // input of shape `input`; returns its output's shape. A network that does not describe
  // itself throws gridnn::Error (the default).
  virtual Shape describe_block(size_t i, const Shape& input, plan::RankStep& step) const;

  // Whether block i may drop its forward's state and run its forward again before its
  // backward (--recompute blocks): its layers keep nothing that its input does not determine
  // (ResAttNet3D's stem, residual and attention blocks). None by default.
  virtual bool recomputable(size_t /*i*/) const { return false; }
  // Frees what block i's last forward kept for its backward (its modules' release_saved).
  virtual void release_block(size_t /*i*/) {}
  bool has_recomputable_blocks() const;

  // --recompute blocks (docs/design.md §6a): from now on forward_blocks keeps of each
  // recomputable block only its input, and backward_blocks runs the block's forward again
  // from it (in a RecomputeScope) just before its backward. The gradients are bitwise those
  // of a run without it.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

  size_t block_count() const { return blocks().size(); }
  // Blocks [begin, end) forward in order, and their backward in reverse (a pipeline stage
  // runs its partition's; the network its every block).
  Tensor forward_blocks(size_t begin, size_t end, const Tensor& x);
  Tensor backward_blocks(size_t begin, size_t end, const Tensor& dy);
  Shape describe_blocks(size_t begin, size_t end, const Shape& input, plan::RankStep& step) const;
  // The block a state_dict name belongs to; throws gridnn::Error when none does.
  size_t block_of(const std::string& tensor_name) const;
  std::vector<std::string> block_names() const;

 private:
  bool recompute_ = false;
  std::vector<Tensor> stashed_;  // per block: the input of its forward, while its state is dropped
};

}  // namespace gridnn::nn
