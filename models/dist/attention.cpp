// DistSelfAttention3d: the attention core on this rank's queries, with keys and values
// gathered over the row (see the header).
#include "models/dist/attention.h"

#include "core/profile.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"

namespace gridnn::nn {

DistSelfAttention3d::DistSelfAttention3d(parallel::ProcessGrid& grid, int64_t channels, int64_t global_depth,
                                         Device device)
    : Module("SelfAttention3d"), row_(grid.row()), global_depth_(global_depth) {
  layer_ = &register_module("", std::make_unique<SelfAttention3d>(channels, device));
  require_layer(global_depth >= row_.size(), layer_->label(),
                "depth " + std::to_string(global_depth) + " split over " + std::to_string(row_.size()) +
                    " row ranks leaves a rank without planes; the largest usable Pr is " +
                    std::to_string(global_depth));
  planes_ = parallel::balanced_range(global_depth, row_.size(), row_.rank());
  for (auto& [name, p] : layer_->named_parameters()) p->layout.grad_sum_over = &grid.stage_comm();
}

parallel::BlockSplit DistSelfAttention3d::positions(int64_t hw) const { return {&row_, 2, global_depth_, hw}; }

Tensor DistSelfAttention3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::attention, name(), ProfilePass::forward);
  const int64_t c = layer_->channels(), c8 = c / 8;
  require_layer(x.defined() && x.rank() == 5 && x.size(1) == c && x.size(2) == planes_.size(), layer_->label(),
                "expects this rank's slab [B, " + std::to_string(c) + ", " + std::to_string(planes_.size()) +
                    " (planes " + std::to_string(planes_.begin) + ".." + std::to_string(planes_.end - 1) + " of " +
                    std::to_string(global_depth_) + "), H, W], got " +
                    (x.defined() ? x.str() : std::string("undefined")));
  require_layer(x.device() == layer_->gamma().value.device(), layer_->label(),
                "input " + x.str() + " is not on the parameters' device " + layer_->gamma().value.str());
  parallel::CommLayerScope scope(name());
  const int64_t b = x.size(0), hw = x.size(3) * x.size(4), nr = planes_.size() * hw;
  input_shape_ = x.shape();
  Tensor q = layer_->query().forward(x).reshape({b, c8, nr});
  // Own keys and values stacked [K; V], gathered into those of every position.
  Tensor kv = Tensor::empty({b, c8 + c, nr}, x.dtype(), x.device());
  ops::copy_slices(layer_->key().forward(x).reshape({b, c8, nr}), 1, 0, kv, 0, c8);
  ops::copy_slices(layer_->value().forward(x).reshape({b, c, nr}), 1, 0, kv, c8, c);
  const Tensor all = parallel::gather_blocks(kv, positions(hw));
  Tensor y = attention_forward(x, std::move(q), ops::slice(all, 1, 0, c8), ops::slice(all, 1, c8, c), layer_->gamma(),
                               math_mode(), core_);
  if (NoBackwardScope::active()) core_ = AttentionCore();
  return y;
}

Tensor DistSelfAttention3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::attention, name(), ProfilePass::backward);
  require_layer(core_.attention.defined(), layer_->label(), "backward called before forward");
  require_layer(dy.defined() && dy.shape() == input_shape_, layer_->label(),
                "dy " + (dy.defined() ? dy.str() : std::string("undefined")) + " does not match the output " +
                    input_shape_.str() + " of the last forward");
  parallel::CommLayerScope scope(name());
  const Shape& s = input_shape_;
  const int64_t b = s[0], c = layer_->channels(), c8 = c / 8, hw = s[3] * s[4], n = global_depth_ * hw;
  const AttentionGradients g = attention_backward(dy, layer_->gamma(), math_mode(), core_);
  // The gather's pair: every rank's dK, dV of all positions summed, each keeping its own.
  Tensor dkv = Tensor::empty({b, c8 + c, n}, dy.dtype(), dy.device());
  ops::copy_slices(g.dk, 1, 0, dkv, 0, c8);
  ops::copy_slices(g.dv, 1, 0, dkv, c8, c);
  const Tensor own = parallel::reduce_scatter_blocks(dkv, positions(hw));
  // dx = dy + Wq^T dQ + Wk^T dK + Wv^T dV (and the projections' parameter gradients).
  Tensor dx = Tensor::empty(s, dy.dtype(), dy.device());
  ops::add(dy, layer_->query().backward(g.dq.reshape({b, c8, s[2], s[3], s[4]})), dx);
  ops::add(dx, layer_->key().backward(ops::slice(own, 1, 0, c8).reshape({b, c8, s[2], s[3], s[4]})), dx);
  ops::add(dx, layer_->value().backward(ops::slice(own, 1, c8, c).reshape({b, c, s[2], s[3], s[4]})), dx);
  core_ = AttentionCore();  // used: freed now, not at the next forward
  return dx;
}

Shape DistSelfAttention3d::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5 && in[2] == planes_.size(), name(), "cannot run on an input " + in.str());
  const int64_t c = layer_->channels(), hw = in[3] * in[4], nr = planes_.size() * hw, n = global_depth_ * hw;
  layer_->describe(in, step);
  step.layers.back().forward_flops = 2.0 * attention_macs(c, nr, n, nr);  // own queries over all positions
  // Own queries over all positions; the stacked own [K; V] and their gathered copies exist
  // for a moment in forward, and all positions' [dK; dV] with this rank's block in backward.
  plan::LayerMemory& m = step.memory.back();
  m = attention_memory(name(), in[0], c, nr, n, layer_->math_mode(), layer_->gamma().value.device());
  const int64_t own_kv = activation_bytes({in[0], c / 8 + c, nr}), all_kv = activation_bytes({in[0], c / 8 + c, n});
  m.forward_scratch += own_kv + 2 * all_kv;
  m.backward_scratch += all_kv + own_kv;
  const int64_t kv = in[0] * (c / 8 + c);
  const int procs = row_.size();
  step.calls.push_back(plan::make_call(name(), "row", "all_gatherv", kv * nr, procs, double(kv * (n - nr))));
  step.calls.push_back(plan::make_call(name(), "row", "reduce_scatterv", kv * n, procs, double(kv * (n - nr))));
  step.calls.back().backward = true;
  return in;
}

}  // namespace gridnn::nn
