// Self-attention on depth slabs (docs/design.md §4, §5): the single-process SelfAttention3d
// (registered under this layer's own name: same parameters, names and initialization) with
// its keys and values gathered over the grid's row.
//
// Distribution. Rank r of the row holds depth planes balanced_range(D, Pr, r) of each of its
// samples: x is [B, C, D_r, H, W], N_r = D_r H W of the N = D H W positions, numbered
// depth-major, so rank slabs are consecutive position ranges in rank order. The rank
// projects its own positions' queries, keys and values, then
//   forward   gather <-> reduce-scatter (parallel/mappings.h): the keys and values of its
//             positions, stacked [K; V] [B, C/8 + C, N_r], all-gathered over the row into
//             those of all N positions (one all_gatherv of B (C/8 + C) N_r elements); then
//             the attention core (models/layers/attention.h) of its N_r queries over all N
//             positions: its rows A [B, N_r, N] of the attention matrix, its slab of O and y.
//   backward  the core's dK, dV for all N positions are this rank's partial sums (its
//             queries' share); reduce_scatterv over the row sums them and leaves each rank
//             its own positions' (B (C/8 + C) N elements in); dQ is local.
// Labelled with the layer's name. The parameters are replicated on the stage: each rank's
// gradients are its partial sums (its positions of its samples), summed over the stage after
// backward (grad_sum_over).
//
// Memory per rank (fp32): A [B, N_r, N] kept for backward and one more while backward runs
// (1/Pr of the single-process layer's N^2), the gathered K, V [B, C/8 + C, N], and x, Q, O of
// the slab. Attention still grows with N N_r: it belongs after the downsampling stages.
// Every rank must own at least one plane (D >= Pr).
#pragma once

#include <cstdint>

#include "models/layers/attention.h"
#include "parallel/mappings.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class DistSelfAttention3d : public Module {
 public:
  // channels: a positive multiple of 8; global_depth: D of the whole volume.
  DistSelfAttention3d(parallel::ProcessGrid& grid, int64_t channels, int64_t global_depth,
                      Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;  // [B, C, D_r, H, W] -> same shape
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  // The depth planes this rank owns.
  parallel::Range planes() const { return planes_; }
  // This rank's rows of the last forward's attention matrices, [B, N_r, N].
  const Tensor& attention() const { return core_.attention; }

 private:
  void drop_saved() override { core_ = AttentionCore(); }
  Tensor do_backward(const Tensor& dy) override;  // dy, dx: [B, C, D_r, H, W]

  // Keys and values along the positions (dimension 2) of [B, C/8 + C, positions]: D planes
  // of H W positions each, balanced over the row.
  parallel::BlockSplit positions(int64_t hw) const;

  SelfAttention3d* layer_;
  parallel::Communicator& row_;
  int64_t global_depth_;
  parallel::Range planes_;
  Shape input_shape_;  // of the last forward
  AttentionCore core_;
};

}  // namespace gridnn::nn
