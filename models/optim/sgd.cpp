// SGD over ops::sgd_update: options checks, lazy momentum buffers, state.
#include "models/optim/sgd.h"

#include <cmath>
#include <vector>

#include "kernels/optim.h"

namespace gridnn::optim {

Sgd::Sgd(OptimizerOptions options, ParameterList params)
    : Optimizer(options, std::move(params)), momentum_buffers_(params_.size()) {
  OptimizerOptions& o = options_;
  GRIDNN_REQUIRE(o.kind == OptimizerKind::sgd, "Sgd: options.kind is ", enum_name(o.kind), "; use make_optimizer");
  if (o.weight_decay < 0.0) o.weight_decay = 0.0;
  GRIDNN_REQUIRE(std::isfinite(o.momentum) && o.momentum >= 0.0, "SGD: momentum must be >= 0, got ", o.momentum);
  GRIDNN_REQUIRE(o.dampening >= 0.0 && o.dampening <= 1.0, "SGD: dampening must be in [0, 1], got ", o.dampening);
  GRIDNN_REQUIRE(std::isfinite(o.weight_decay), "SGD: weight_decay must be finite, got ", o.weight_decay);
  GRIDNN_REQUIRE(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
                 "SGD: nesterov needs momentum > 0 and dampening 0, got momentum ", o.momentum, " and dampening ",
                 o.dampening);
  detail::check_parameters("SGD", params_);
}

void Sgd::step(double lr) {
  detail::check_learning_rate("SGD", lr);
  const bool with_momentum = options_.momentum != 0.0;
  // One list per kind of update: the parameters whose momentum buffer starts now (it takes
  // the first step's d) and the others.
  std::vector<ops::SgdTensors> fresh, later;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i].second;
    if (!p.grad.defined()) continue;
    Tensor& buf = momentum_buffers_[i];
    (buf.defined() ? later : fresh).push_back({&p.value, &p.grad, &buf});
    if (with_momentum && !buf.defined()) buf = Tensor::empty(p.value.shape(), DType::f32, p.value.device());
  }
  ops::SgdSpec spec;
  spec.lr = lr;
  spec.momentum = options_.momentum;
  spec.dampening = options_.dampening;
  spec.weight_decay = options_.weight_decay;
  spec.nesterov = options_.nesterov;
  spec.first_step = true;
  ops::sgd_update(fresh, spec);
  spec.first_step = false;
  ops::sgd_update(later, spec);
  ++steps_;
}

std::vector<detail::BufferSlot> Sgd::slots() {
  std::vector<detail::BufferSlot> out;
  if (options_.momentum == 0.0) return out;
  for (size_t i = 0; i < params_.size(); ++i)
    out.push_back({params_[i].first + ".momentum_buffer", params_[i].second, &momentum_buffers_[i]});
  return out;
}

NamedTensors Sgd::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined()) out.emplace_back(params_[i].first + ".momentum_buffer", momentum_buffers_[i]);
  return out;
}

void Sgd::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  detail::load_buffers("SGD", slots(), tensors, steps);
  steps_ = steps;
}

}  // namespace gridnn::optim
