// nn::DistGlobalAvgPool3d: global average pooling of a depth-split volume (the
// GlobalAvgPool3d row of DESIGN §4's table): [B, C, D_r, H, W] slab -> [B, C] features,
// replicated on every rank of `row`.
//
//   forward   partial sums over this rank's positions, all_reduce over row, / N
//             (N = global_positions = D * H * W of the whole volume): B * C elements
//   backward  dx = dy / N broadcast over this rank's positions: no communication
//
// Megatron's pairing: the forward is a reduction (all_reduce) whose output is replicated,
// so its backward is a copy — valid because dy is the same on every rank of the row (the
// head after it, e.g. DistLinear, computes the loss redundantly on each row rank).
// No parameters. Labelled comm_label() ("GlobalAvgPool3d" by default).
#pragma once

#include <cstdint>
#include <string>

#include "models/module.h"
#include "parallel/communicator.h"

namespace gridnn::nn {

class DistGlobalAvgPool3d : public Module {
 public:
  DistGlobalAvgPool3d(parallel::Communicator& row, int64_t global_positions);

  Tensor forward(const Tensor& x) override;    // [B, C, D_r, H, W] -> [B, C] (replicated)
  Tensor backward(const Tensor& dy) override;  // [B, C] -> [B, C, D_r, H, W]

  const std::string& comm_label() const { return comm_label_; }
  void set_comm_label(std::string label) { comm_label_ = std::move(label); }
  void on_named(const std::string& name) override { set_comm_label(name); }

 private:
  parallel::Communicator& row_;
  int64_t global_positions_;
  std::string comm_label_ = "GlobalAvgPool3d";
  Shape input_shape_;
};

}  // namespace gridnn::nn
