// GatherDepth and Replicated: the hand-over from depth slabs to whole volumes.
#include "models/dist/replicated.h"

namespace gridnn::nn {

GatherDepth::GatherDepth(parallel::Communicator& row, int64_t global_depth)
    : Module("GatherDepth"), split_{&row, 2, global_depth, 1} {
  require_layer(global_depth >= row.size(), "GatherDepth",
                std::to_string(global_depth) + " planes split over " + std::to_string(row.size()) +
                    " row ranks leave a rank without planes");
}

Tensor GatherDepth::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 5 && x.size(2) == split_.own().size(), "GatherDepth",
                "expects this rank's " + std::to_string(split_.own().size()) + " of " + std::to_string(split_.whole()) +
                    " depth planes [B, C, d, H, W], got " + (x.defined() ? x.str() : std::string("(undefined)")));
  return parallel::gather_blocks(x, split_);
}

Tensor GatherDepth::do_backward(const Tensor& dy) {
  require_layer(dy.defined() && dy.rank() == 5 && dy.size(2) == split_.whole(), "GatherDepth",
                "dy must hold all " + std::to_string(split_.whole()) + " depth planes, got " +
                    (dy.defined() ? dy.str() : std::string("(undefined)")));
  return parallel::own_block(dy, split_);
}

Shape GatherDepth::describe(const Shape& in, plan::RankStep& step) const { return describe_as(name(), in, step); }

Shape GatherDepth::describe_as(const std::string& label, const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5 && in[2] == split_.own().size(), label, "cannot gather an input " + in.str());
  const int64_t plane = in[0] * in[1] * in[3] * in[4], own = split_.own().size();
  // The whole volume (and on the way this rank's slab and the gathered slabs, depth first);
  // backward takes this rank's planes of dY.
  plan::LayerMemory m;
  m.layer = label;
  m.output = activation_bytes(in.with(2, split_.whole()));
  m.forward_scratch = activation_bytes(in) + m.output;
  m.input_grad = activation_bytes(in);
  step.memory.push_back(m);
  step.calls.push_back(plan::make_call(label, "row", "all_gatherv", own * plane, split_.comm->size(),
                                       double((split_.whole() - own) * plane)));
  return in.with(2, split_.whole());
}

Replicated::Replicated(parallel::ProcessGrid& grid, std::unique_ptr<Module> layer, int64_t in_depth)
    : Module("Replicated") {
  if (in_depth > 0) gather_ = std::make_unique<GatherDepth>(grid.row(), in_depth);
  layer_ = &register_module("", std::move(layer));
  for (auto& [name, p] : layer_->named_parameters()) p->layout.grad_sum_over = &grid.col();
}

Tensor Replicated::forward(const Tensor& x) {
  if (!gather_) return layer_->forward(x);
  Tensor whole;
  {
    parallel::CommLayerScope scope(name() + " (gather)");
    whole = gather_->forward(x);
  }
  return layer_->forward(whole);
}

Tensor Replicated::do_backward(const Tensor& dy) {
  const Tensor d = layer_->backward(dy);
  return d.defined() && gather_ ? gather_->backward(d) : d;
}

Shape Replicated::describe(const Shape& in, plan::RankStep& step) const {
  if (!gather_) return layer_->describe(in, step);
  const Shape whole = gather_->describe_as(name() + " (gather)", in, step);
  step.memory.back().wraps_next = true;
  return layer_->describe(whole, step);
}

}  // namespace gridnn::nn
