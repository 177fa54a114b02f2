// A Linear layer split 1.5D over the grid's row (docs/design.md §4): Linear(in -> out) whose
// output rows are dealt to the Pr ranks of the row.
//
// Distribution. Rank r of the row holds row block r of the weight and bias: rows
// balanced_range(out, Pr, r), a single-process Linear(in -> out_r) registered under this
// layer's own name (so its parameters are "weight" [out_r, in] and "bias" [out_r]), whose
// ParameterLayout says which rows of the whole tensors it holds: checkpoints and state dicts
// hold the whole tensors (models/run/whole_state.h), and initialize(seed) draws each
// block's elements as the whole layer's. Every rank of the row holds the full input
// features X [B, in] of its B samples (replicated over the row, e.g. by the global pooling
// before it) and ends with the full output Y [B, out] (replicated):
//
//   forward   gather <-> own block (parallel/mappings.h): Y_r = X W_r^T + b_r [B, out_r];
//             all_gatherv over the row along the features (B out_r elements sent) -> Y
//   backward  dY is the same on every rank of the row: its own block dY_r, no communication;
//             dX = dY_r W_r is this rank's partial sum -> the copy <-> all-reduce pair:
//             all_reduce over the row (B in elements); dW_r += dY_r^T X, db_r += sum dY_r
//             from this rank's batch shard, summed over col after backward (grad_sum_over)
// When the layer below is also 1.5D, dX could be reduce-scattered instead; this layer always
// all-reduces (its input is replicated). Labelled with the layer's name ("Linear" until
// named).
#pragma once

#include <cstdint>

#include "models/layers/linear.h"
#include "parallel/mappings.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class DistLinear : public Module {
 public:
  // Needs at least one output row per row rank (out >= Pr).
  DistLinear(parallel::ProcessGrid& grid, int64_t in_features, int64_t out_features, bool bias = true,
             Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;  // x [B, in] -> y [B, out], both replicated over row
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  int64_t in_features() const { return layer_->in_features(); }
  int64_t out_features() const { return out_; }
  // The rows of the whole weight and bias this rank holds.
  parallel::Range block() const { return outputs_.own(); }
  Linear& block_layer() { return *layer_; }

 private:
  Tensor do_backward(const Tensor& dy) override;  // dy [B, out] -> dx [B, in], both replicated

  Linear* layer_;
  parallel::Communicator& row_;
  int64_t out_;
  parallel::BlockSplit outputs_;  // along the features (dimension 1) of Y
};

}  // namespace gridnn::nn
