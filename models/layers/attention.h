// 3D self-attention (docs/design.md §5), as in 3D-ResAttNet: for x [B, C, D, H, W] and
// N = D * H * W, per sample (X the [C, N] view of the sample):
//   Q = Wq X + bq  [C/8, N]     K = Wk X + bk  [C/8, N]     V = Wv X + bv  [C, N]
//   A = softmax over keys of (Q^T K)  [N, N], no scaling      O = V A^T  [C, N]
//   y = gamma * O + x                                         (gamma [1], starts at 0)
//
// Parameters have PyTorch's names and shapes: "gamma" [1], "query.weight" [C/8, C, 1, 1, 1],
// "query.bias" [C/8], "key.weight", "key.bias", "value.weight" [C, C, 1, 1, 1],
// "value.bias" [C]. The 1x1x1 convolutions are GEMMs over the flattened volume.
//
// Memory grows with the square of the volume: forward keeps the attention matrix A for
// backward, 4 * N^2 bytes per sample (fp32; S = Q^T K is computed in A's place), and
// backward needs one more N x N matrix per sample while it runs (dA, then dS in its place).
// N = 8^3: 1 MiB per sample; 16^3: 64 MiB; 32^3: 4 GiB; 64^3: 256 GiB — so attention goes
// after the downsampling stages (layer3, layer4). Besides A it keeps x, Q, K, V and O:
// (2 C + 2 C/8 + C) * N * 4 bytes per sample.
//
// With gamma = 0 (the initial value) y = x: the attention path passes no gradient back,
// and of the parameters only gamma gets one, dgamma = sum(dy * O).
//
// Precision: the projections and the products Q^T K, V A^T (and their backward GEMMs) run
// in the module's math_mode(); softmax, the bias additions and the gamma scaling are fp32.
#pragma once

#include <cstdint>

#include "models/layers/module.h"

namespace gridnn::nn {

// Conv3d(in -> out, kernel 1, stride 1, bias) on [B, in, D, H, W]: y_b = W x_b + b with
// x_b viewed as [in, D*H*W]. "weight" [out, in, 1, 1, 1], "bias" [out], initialized as
// PyTorch's Conv3d: uniform(-1/sqrt(in), 1/sqrt(in)) for both.
class PointwiseConv3d : public Module {
 public:
  PointwiseConv3d(int64_t in_channels, int64_t out_channels, Device device = Device::cpu());
  Tensor forward(const Tensor& x) override;

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  void drop_saved() override { input_ = Tensor(); }
  Tensor do_backward(const Tensor& dy) override;

  std::string label() const;     // "PointwiseConv3d(in -> out)"
  Tensor weight_matrix() const;  // [out, in] view of the weight
  int64_t in_, out_;
  Parameter* weight_;
  Parameter* bias_;
  Tensor input_;
};

// The attention itself, shared by SelfAttention3d and the distributed layer
// (models/dist/attention.h): for queries Q [B, C/8, Nq] of Nq positions, keys K [B, C/8, N]
// and values V [B, C, N] of N >= Nq positions (N = Nq on one process; a rank's slab of
// queries against every position's keys and values on a grid):
//   A = softmax over keys of Q^T K  [B, Nq, N]     O = V A^T  [B, C, Nq]     y = x + gamma O
// attention_forward keeps Q, K, V, A and O in `core` for attention_backward, which adds
// sum(dy * O) to gamma's gradient and returns dQ, dK, dV (dK, dV for all N positions: on a
// grid each rank's are partial sums of the keys' and values' gradients).
struct AttentionCore {
  Tensor q, k, v, attention, o;
};
struct AttentionGradients {
  Tensor dq, dk, dv;
};
// x, y: [B, C, Nq] views (any shape with those elements); gamma [1].
Tensor attention_forward(const Tensor& x, Tensor q, Tensor k, Tensor v, const Parameter& gamma, ops::MathMode math,
                         AttentionCore& core);
AttentionGradients attention_backward(const Tensor& dy, Parameter& gamma, ops::MathMode math,
                                      const AttentionCore& core);
// Multiply-adds of one sample of the attention of Nq queries over N positions with C channels,
// the projections of `projected` positions included (the cost model's forward FLOPs / 2).
double attention_macs(int64_t channels, int64_t queries, int64_t positions, int64_t projected);
// The memory of the attention of `batch` samples, Nq own queries over N positions with C
// channels (the memory model's record; docs/design.md §6a): it keeps its input (for the
// projections' weight gradients), Q, K, V, the attention matrix and O; its output is a new
// tensor (x + gamma O); its backward's largest moment is inside attention_backward. Under
// tf32 or bf16 on the host each GEMM also holds rounded copies of its two operands, at most
// twice the largest of x, V and the attention matrix, and a weight (rounded_copies_bytes).
plan::LayerMemory attention_memory(const std::string& name, int64_t batch, int64_t channels, int64_t queries,
                                   int64_t positions, ops::MathMode math, const Device& device);

class SelfAttention3d : public Module {
 public:
  // channels must be divisible by 8 (queries and keys have channels / 8).
  explicit SelfAttention3d(int64_t channels, Device device = Device::cpu());

  Tensor forward(const Tensor& x) override;  // [B, C, D, H, W] -> same shape
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  int64_t channels() const { return channels_; }
  PointwiseConv3d& query() { return *query_; }
  PointwiseConv3d& key() { return *key_; }
  PointwiseConv3d& value() { return *value_; }
  Parameter& gamma() { return *gamma_; }
  // The attention matrices of the last forward, [B, N, N] (row i: query position i).
  const Tensor& attention() const { return core_.attention; }
  // "SelfAttention3d(C)", for errors.
  std::string label() const;

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  void drop_saved() override { core_ = AttentionCore(); }
  Tensor do_backward(const Tensor& dy) override;

  int64_t channels_;
  Parameter* gamma_;
  PointwiseConv3d* query_;
  PointwiseConv3d* key_;
  PointwiseConv3d* value_;
  Shape input_shape_;  // of the last forward
  AttentionCore core_;
};

// out (+)= scalar * in for a one-element device tensor `scalar` (gamma), without reading it
// on the host: a batch of rank-1 products [1, 1] x [1, N] (exact: one multiply per
// element); beta 0 overwrites out, 1 adds.
void scale_by_tensor(const Tensor& scalar, const Tensor& in, Tensor& out, float beta);

}  // namespace gridnn::nn
