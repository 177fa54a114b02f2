// DistLinear: a row block of Linear, its outputs all-gathered (see the header).
#include "models/dist/linear.h"

namespace gridnn::nn {

DistLinear::DistLinear(parallel::ProcessGrid& grid, int64_t in_features, int64_t out_features, bool bias, Device device)
    : Module("Linear"), row_(grid.row()), out_(out_features), outputs_{&grid.row(), 1, out_features, 1} {
  const std::string label = "DistLinear(" + std::to_string(in_features) + ", " + std::to_string(out_features) + ")";
  require_layer(in_features > 0 && out_features > 0, label, "in_features and out_features must be > 0");
  require_layer(out_features >= row_.size(), label,
                std::to_string(out_features) + " outputs split over " + std::to_string(row_.size()) +
                    " row ranks leave a rank without rows; the largest usable Pr is " + std::to_string(out_features));
  layer_ = &register_module("", std::make_unique<Linear>(in_features, block().size(), bias, device));
  for (auto& [name, p] : layer_->named_parameters()) {
    p->layout.split_over = &row_;  // rows (dimension 0) of the weight and bias
    p->layout.whole = out_features;
    p->layout.first = block().begin;
    p->layout.grad_sum_over = &grid.col();
  }
}

Tensor DistLinear::forward(const Tensor& x) {
  parallel::CommLayerScope scope(name());
  return parallel::gather_blocks(layer_->forward(x), outputs_);  // Y_r, gathered into Y
}

Tensor DistLinear::do_backward(const Tensor& dy) {
  parallel::CommLayerScope scope(name());
  Tensor dx = layer_->backward(parallel::own_block(dy, outputs_));  // this rank's part of dX
  row_.all_reduce(dx);
  return dx;
}

Shape DistLinear::describe(const Shape& in, plan::RankStep& step) const {
  const Shape y = layer_->describe(in, step);
  const int64_t own = block().size();
  step.calls.push_back(
      plan::make_call(name(), "row", "all_gatherv", in[0] * own, row_.size(), double(in[0] * (out_ - own))));
  step.calls.push_back(plan::make_call(name(), "row", "all_reduce", in[0] * in[1], row_.size()));
  step.calls.back().backward = true;
  // The gather: Y of all row blocks (and a transposed copy of each side on the way); backward
  // takes this rank's block of dY.
  plan::LayerMemory m;
  m.layer = name() + " (gather)";
  m.output = activation_bytes(y.with(1, out_));
  m.forward_scratch = 2 * m.output;
  m.input_grad = activation_bytes(y);
  step.memory.push_back(m);
  return y.with(1, out_);
}

}  // namespace gridnn::nn
