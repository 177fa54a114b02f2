// Adam and AdamW over ops::adam_update: options checks, lazy moments, state.
#include "models/optim/adam.h"

#include <cmath>
#include <vector>

#include "kernels/optim.h"

namespace gridnn::optim {

Adam::Adam(OptimizerOptions options, ParameterList params)
    : Optimizer(options, std::move(params)),
      decoupled_(options_.kind == OptimizerKind::adamw),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {
  OptimizerOptions& o = options_;
  GRIDNN_REQUIRE(o.kind != OptimizerKind::sgd, "Adam: options.kind is sgd; use make_optimizer");
  if (o.weight_decay < 0.0) o.weight_decay = decoupled_ ? 1e-2 : 0.0;
  GRIDNN_REQUIRE(o.beta1 >= 0.0 && o.beta1 < 1.0, name(), ": beta1 must be in [0, 1), got ", o.beta1);
  GRIDNN_REQUIRE(o.beta2 >= 0.0 && o.beta2 < 1.0, name(), ": beta2 must be in [0, 1), got ", o.beta2);
  GRIDNN_REQUIRE(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
  GRIDNN_REQUIRE(std::isfinite(o.weight_decay), name(), ": weight_decay must be finite, got ", o.weight_decay);
  detail::check_parameters(name(), params_);
}

void Adam::step(double lr) {
  detail::check_learning_rate(name(), lr);
  const int64_t t = steps_ + 1;
  ops::AdamSpec spec;
  spec.lr = lr;
  spec.beta1 = options_.beta1;
  spec.beta2 = options_.beta2;
  spec.eps = options_.eps;
  spec.weight_decay = options_.weight_decay;
  spec.decoupled = decoupled_;
  spec.bias_correction1 = ops::adam_bias_correction(options_.beta1, t);
  spec.bias_correction2 = ops::adam_bias_correction(options_.beta2, t);
  std::vector<ops::AdamTensors> tensors;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i].second;
    if (!p.grad.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = Tensor::zeros(p.value.shape(), DType::f32, p.value.device());
      exp_avg_sq_[i] = Tensor::zeros(p.value.shape(), DType::f32, p.value.device());
    }
    tensors.push_back({&p.value, &p.grad, &exp_avg_[i], &exp_avg_sq_[i]});
  }
  ops::adam_update(tensors, spec);
  ++steps_;
}

std::vector<detail::BufferSlot> Adam::slots() {
  std::vector<detail::BufferSlot> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back({params_[i].first + ".exp_avg", params_[i].second, &exp_avg_[i]});
    out.push_back({params_[i].first + ".exp_avg_sq", params_[i].second, &exp_avg_sq_[i]});
  }
  return out;
}

NamedTensors Adam::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (exp_avg_[i].defined()) {
      out.emplace_back(params_[i].first + ".exp_avg", exp_avg_[i]);
      out.emplace_back(params_[i].first + ".exp_avg_sq", exp_avg_sq_[i]);
    }
  return out;
}

void Adam::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  detail::load_buffers(name(), slots(), tensors, steps);
  steps_ = steps;
}

}  // namespace gridnn::optim
