// InputSplitLinear: a column block of Linear, its partial outputs all-reduced (see the header).
#include "models/dist/input_split_linear.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"
#include "kernels/reduce.h"

namespace gridnn::nn {

InputSplitLinear::InputSplitLinear(parallel::ProcessGrid& grid, int64_t in_features, int64_t out_features,
                                   Device device)
    : Module("Linear"),
      row_(grid.row()),
      in_(in_features),
      out_(out_features),
      inputs_{&grid.row(), 1, in_features, 1} {
  const std::string label =
      "InputSplitLinear(" + std::to_string(in_features) + ", " + std::to_string(out_features) + ")";
  require_layer(in_features > 0 && out_features > 0, label, "in_features and out_features must be > 0");
  require_layer(in_features >= row_.size(), label,
                std::to_string(in_features) + " input features split over " + std::to_string(row_.size()) +
                    " row ranks leave a rank without any; the largest usable Pr is " + std::to_string(in_features));
  bias_ = &register_parameter("bias", Tensor::zeros({out_features}, DType::f32, device));
  bias_->layout.grad_sum_over = &grid.col();  // the same on every rank of the row
  layer_ = &register_module("", std::make_unique<Linear>(block().size(), out_features, false, device));
  Parameter& w = layer_->weight();
  w.layout.split_over = &row_;  // columns (dimension 1) of the weight
  w.layout.split_dim = 1;
  w.layout.whole = in_features;
  w.layout.first = block().begin;
  w.layout.grad_sum_over = &grid.col();
}

// Linear's initializer for the bias (the weight block draws its own, keyed by its place).
void InputSplitLinear::reset_parameters(uint64_t seed, const std::string& prefix) {
  const float bound = 1.0f / std::sqrt(float(in_));
  ops::uniform_(bias_->value, -bound, bound, parameter_key(seed, prefix, "bias", *bias_));
}

Tensor InputSplitLinear::forward(const Tensor& x) {
  parallel::CommLayerScope scope(name());
  Tensor y = layer_->forward(parallel::own_block(x, inputs_));  // X_r W_r^T
  row_.all_reduce(y);                                           // summed over the row's blocks
  if (y.numel() > 0) {                                          // + 1 b^T: a rank-1 GEMM (one product by 1 per element)
    Tensor ones = Tensor::empty({y.size(0), 1}, y.dtype(), y.device());
    ops::fill(ones, 1.0);
    ops::gemm(ones, bias_->value.reshape({1, out_}), y, ops::gemm_options(false, false, 1.0f));
  }
  return y;
}

Tensor InputSplitLinear::do_backward(const Tensor& dy) {
  parallel::CommLayerScope scope(name());
  if (dy.size(0) > 0) ops::axpy(1.0f, ops::sum(dy, 0), bias_->grad);  // db += sum over the batch
  return parallel::gather_blocks(layer_->backward(dy), inputs_);      // dX_r, gathered into dX
}

Shape InputSplitLinear::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 2 && in[1] == in_, name(), "cannot run on an input " + in.str());
  // This rank's block of X (a copy); backward gathers dX of every block (transposed copies on
  // the way).
  plan::LayerMemory own;
  own.layer = name() + " (own block)";
  own.output = activation_bytes(in.with(1, block().size()));
  own.input_grad = activation_bytes(in);
  own.backward_scratch = 2 * own.input_grad;
  own.wraps_next = true;
  step.memory.push_back(own);
  layer_->describe(in.with(1, block().size()), step);
  step.layers.back().weights += out_;  // the bias, replicated
  const int procs = row_.size();
  step.calls.push_back(plan::make_call(name(), "row", "all_reduce", in[0] * out_, procs));
  step.calls.push_back(plan::make_call(name(), "row", "all_gatherv", in[0] * block().size(), procs,
                                       double(in[0] * (in_ - block().size()))));
  step.calls.back().backward = true;
  return {in[0], out_};
}

}  // namespace gridnn::nn
