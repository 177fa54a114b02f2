// A Linear layer whose input features are split over the grid's row (Megatron-LM's
// row-parallel linear; DistLinear splits the outputs instead; docs/design.md §4).
//
// Distribution. Rank r of the row holds column block r of the weight, W[:, balanced_range(in,
// Pr, r)] — a single-process Linear(in_r -> out) registered under this layer's own name, so
// the parameter is "weight" [out, in_r], a block of dimension 1 of the whole [out, in] — and
// the whole bias [out]. The input features X [B, in] of its B samples are replicated over the
// row, as is the output Y [B, out]:
//
//   forward   own block <-> gather (parallel/mappings.h): X_r, this rank's features (no
//             communication); Y_r = X_r W_r^T is this rank's partial sum -> the all-reduce <->
//             copy pair: all_reduce over the row (B out elements); Y = that + b
//   backward  dY is the same on every rank of the row (no communication); dX_r = dY W_r,
//             all-gathered over the row into dX (B in_r elements sent); dW_r += dY^T X_r and
//             db += sum dY from this rank's batch shard, summed over col after backward
// Labelled with the layer's name ("Linear" until named).
#pragma once

#include <cstdint>

#include "models/layers/linear.h"
#include "parallel/mappings.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class InputSplitLinear : public Module {
 public:
  // Needs at least one input feature per row rank (in >= Pr).
  InputSplitLinear(parallel::ProcessGrid& grid, int64_t in_features, int64_t out_features,
                   Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;  // x [B, in] -> y [B, out], both replicated over row
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  // The input features (columns of the whole weight) this rank holds.
  parallel::Range block() const { return inputs_.own(); }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  Tensor do_backward(const Tensor& dy) override;  // dy [B, out] -> dx [B, in], both replicated

  Linear* layer_;  // the column block, without bias
  Parameter* bias_;
  parallel::Communicator& row_;
  int64_t in_, out_;
  parallel::BlockSplit inputs_;  // along the features (dimension 1) of X
};

}  // namespace gridnn::nn
