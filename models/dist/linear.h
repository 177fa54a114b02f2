// nn::DistLinear: a Linear layer split 1.5D (the Linear row of DESIGN §4's table).
//
// Distribution. The layer is Linear(in -> out) with global parameters "weight" [out, in] and
// "bias" [out]. Rank r of `row` (size Pr) holds row block r of them: rows
// balanced_range(out, Pr, r) of the weight ([out_r, in]) and of the bias ([out_r]),
// registered under the global names "weight" / "bias" (with block shapes). Every rank of the
// row holds the full input features X [B, in] of its B samples (replicated over the row,
// e.g. by DistGlobalAvgPool3d) and ends with the full output Y [B, out] (replicated).
//
//   forward   Y_r^T = W_r X^T + b_r 1^T [out_r, B]; all_gatherv of the Y_r^T over row
//             (B * out_r elements sent) stacks the row blocks of Y^T [out, B]; Y = (Y^T)^T.
//   backward  dY (replicated) -> dY_r^T, this rank's rows of dY^T (the gather's backward: a
//             split, no communication, because every row rank holds the same dY);
//             dX = dY_r W_r, partial over the row's blocks -> all_reduce over row
//             (B * in elements; the backward of the replicated input, a copy);
//             dW_r += dY_r^T X, db_r += sum_b dY_r: local, this rank's batch shard only —
//             the trainer all-reduces them over col_comm (the ranks holding the same
//             block r for other batch shards), not over the stage.
// When the layer below is also 1.5D, dX could be reduce-scattered instead of all-reduced
// (DESIGN §4); this layer always all-reduces (its input is replicated).
//
// The transposes Y^T -> Y and dY -> dY^T are fp32 GEMMs with an identity matrix
// ([B, B]): exact for finite values (each result is one product by 1 plus exact zeros;
// a NaN or inf in a column spreads over that column), B * B * out multiply-adds.
//
// Checkpoints and state_dicts. named_parameters() yields the blocks; gather_parameters()
// (collective over the row) returns the full "weight" / "bias" on every rank, and
// scatter_parameters() (no communication) copies this rank's block out of full tensors —
// the mapping to and from the single-process layer's tensors. initialize(seed) draws each
// block's elements from their global flat indices (ops::RandomKey offsets), so the blocks
// of a freshly initialized DistLinear are those of Linear::initialize(seed).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/safetensors.h"
#include "models/module.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class DistLinear : public Module, public RowSplitParameters {
 public:
  DistLinear(parallel::Communicator& row, int64_t in_features, int64_t out_features, bool bias = true,
             Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;    // x [B, in] -> y [B, out], both replicated over row
  Tensor backward(const Tensor& dy) override;  // dy [B, out] -> dx [B, in], both replicated

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // The rows of the global weight and bias this rank holds.
  parallel::Range block() const { return block_; }

  // Collective over the row: the full parameters ("weight" [out, in], "bias" [out]) on every
  // rank, or (gather_gradients) their gradients' blocks stacked the same way.
  NamedTensors gather_parameters();
  NamedTensors gather_gradients();
  // No communication: copies this rank's block of the full "weight" (and "bias") into the
  // parameters. gridnn::Error when a name is missing or a shape is not the global one.
  void scatter_parameters(const std::map<std::string, Tensor>& full);

  // RowSplitParameters: blocks of rows of the weight or bias (or of tensors shaped like them).
  Tensor gather_whole(const Tensor& block) override;
  Tensor take_block(const Tensor& whole) const override;
  Shape whole_shape(const Tensor& block) const override;

  const std::string& comm_label() const { return comm_label_; }
  void set_comm_label(std::string label) { comm_label_ = std::move(label); }
  void on_named(const std::string& name) override { set_comm_label(name); }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  std::string name() const;
  std::vector<int64_t> block_rows() const;  // out_i of every row rank
  NamedTensors gather(bool grads);
  const Tensor& identity(int64_t n, const Tensor& like);

  parallel::Communicator& row_;
  int64_t in_, out_;
  parallel::Range block_;
  std::string comm_label_ = "Linear";
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  Tensor input_;
  Tensor identity_;  // [n, n], for the transposes (cached per batch size)
};

}  // namespace gridnn::nn
