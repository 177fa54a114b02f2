// nn::DistSelfAttention3d: the self-attention of DESIGN §5 on a depth-split volume (the
// SelfAttention3d row of DESIGN §4's table).
//
// Distribution. Rank r of `row` (size Pr) holds depth planes balanced_range(D, Pr, r) of
// each of its samples: x is [B, C, D_r, H, W], N_r = D_r * H * W of the N = D * H * W
// positions. Positions are numbered depth-major, so rank slabs are consecutive position
// ranges in rank order. The rank computes
//   - the queries of its own positions, Q [B, C/8, N_r] (the "query" convolution);
//   - the keys and values of its own positions, transposed, K^T [B, N_r, C/8] and
//     V^T [B, N_r, C] (positions before channels, so that one all_gatherv over `row` of a
//     flat buffer [K^T | V^T] per rank gives every rank the keys and values of all N
//     positions; unpacked into K^T [B, N, C/8], V^T [B, N, C]);
//   - A = softmax over keys of Q^T K, [B, N_r, N]: its rows of the full attention matrix;
//   - O = V A^T [B, C, N_r], y = gamma O + x: its slab of the output.
//
// Communication, Megatron's pairing (DESIGN §10), visible in forward()/backward():
//   forward  all_gatherv of [K^T | V^T] over row     B (C/8 + C) N_r elements sent per rank
//   backward reduce_scatterv of [dK^T | dV^T] over row  (the same sizes): every rank holds
//            dK, dV for all N positions from its own queries; their sum over the row,
//            restricted to a rank's positions, is that rank's dK, dV.
// dQ is local (a rank's queries only meet their own rows of A). Labelled by CommLayerScope
// (comm_label(), "SelfAttention3d" unless set_comm_label() names the layer).
//
// Parameters have SelfAttention3d's names and shapes ("gamma", "query.weight", "query.bias",
// "key.*", "value.*") and are replicated on the stage, so state_dicts, initialize(seed) and
// checkpoints are those of the single-process layer. Their gradients here are this rank's
// partial sums (its positions of its samples); the trainer all-reduces replicated
// gradients over the stage (row and col), after which they equal the 1 x 1 run's.
//
// Memory per rank (fp32): A [B, N_r, N] kept for backward, plus one more [B, N_r, N]
// while backward runs (dA, then dS in its place) — 1/Pr of the single-process layer's N^2 —
// and the gathered K^T, V^T [B, N, C/8 + C] (the full keys and values; kept for backward),
// plus x, Q, O of the slab. Attention still grows with N * N_r, so it belongs after the
// downsampling stages.
//
// Every rank must own at least one plane (D >= Pr).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/layers/attention.h"
#include "models/module.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class DistSelfAttention3d : public Module {
 public:
  // channels: a positive multiple of 8; global_depth: D of the whole volume.
  DistSelfAttention3d(parallel::Communicator& row, int64_t channels, int64_t global_depth,
                      Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;    // [B, C, D_r, H, W] -> same shape
  Tensor backward(const Tensor& dy) override;  // dy, dx: [B, C, D_r, H, W]

  // The depth planes this rank owns.
  parallel::Range planes() const { return planes_; }
  // This rank's rows of the last forward's attention matrices, [B, N_r, N].
  const Tensor& attention() const { return attention_; }

  const std::string& comm_label() const { return comm_label_; }
  void set_comm_label(std::string label) { comm_label_ = std::move(label); }
  void on_named(const std::string& name) override { set_comm_label(name); }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  std::string name() const;
  // The flat gathered buffer's layout for a batch of b samples and hw positions per plane.
  void plan_layout(int64_t b, int64_t hw);
  // K^T, V^T of own positions straight into the send buffer; their backward.
  void project_keys_values(const Tensor& x, Tensor& send);
  void backward_keys_values(const Tensor& recv, Tensor& dx);
  // Gathered buffer -> K^T [B, N, C/8], V^T [B, N, C], and back (for the gradients).
  void unpack(const Tensor& gathered, Tensor& kt, Tensor& vt) const;
  void pack(const Tensor& dkt, const Tensor& dvt, Tensor& gathered) const;

  parallel::Communicator& row_;
  int64_t channels_, global_depth_;
  parallel::Range planes_;
  std::string comm_label_ = "SelfAttention3d";
  Parameter* gamma_;
  PointwiseConv3d* query_;
  Parameter* key_weight_;
  Parameter* key_bias_;
  Parameter* value_weight_;
  Parameter* value_bias_;

  // Layout of the gathered buffer: rank i contributes elements_[i] elements,
  // [K^T_i: B x N_i x C/8 | V^T_i: B x N_i x C]; its positions start at first_[i].
  int64_t batch_ = 0, positions_ = 0;  // B, N
  std::vector<int64_t> counts_, first_, elements_, base_;

  // Kept by forward for backward.
  Shape input_shape_;
  Tensor x_, q_, kt_, vt_, attention_, o_;
};

}  // namespace gridnn::nn
