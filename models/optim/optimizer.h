// Optimizers: PyTorch's update formulas and defaults (torch.optim.SGD, Adam, AdamW), fused
// per element (kernels/optim.h): on the CPU one parallel pass over all the parameters per
// step, on a GPU one kernel per parameter.
//
//   auto opt = optim::make_optimizer(optim::OptimizerOptions{...}, model.named_parameters());
//   loss.backward ... model.backward(dlogits);
//   opt->step(schedule.lr(step));   // reads every Parameter::grad, updates Parameter::value
//
// The state (momentum buffers, Adam moments, the step count) round-trips through
// state()/load_state() for checkpoints, under names "<param>.<what>" such as
// "layer1.0.conv1.weight.momentum_buffer" and "fc.bias.exp_avg_sq".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"
#include "core/safetensors.h"
#include "models/layers/module.h"

namespace gridnn::optim {

using ParameterList = std::vector<std::pair<std::string, nn::Parameter*>>;

enum class OptimizerKind { sgd, adam, adamw };
inline constexpr EnumName<OptimizerKind> kOptimizerKindNames[] = {
    {OptimizerKind::sgd, "sgd"}, {OptimizerKind::adam, "adam"}, {OptimizerKind::adamw, "adamw"}};
constexpr EnumNames<OptimizerKind> enum_names(OptimizerKind) { return {"optimizer", kOptimizerKindNames}; }

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::sgd;
  // SGD (PyTorch defaults: momentum 0, dampening 0, weight decay 0, no Nesterov).
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Adam / AdamW (PyTorch defaults: betas 0.9, 0.999, eps 1e-8).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // L2 penalty added to the gradient (SGD, Adam) or decoupled decay (AdamW). A negative
  // value means "the default of the kind": 0 for SGD and Adam, 1e-2 for AdamW.
  double weight_decay = -1.0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter from its grad at learning rate `lr`.
  virtual void step(double lr) = 0;
  // Buffers by name ("<param>.momentum_buffer", "<param>.exp_avg", "<param>.exp_avg_sq");
  // on the parameters' device. Buffers not created yet (SGD before its first step) are
  // absent.
  virtual NamedTensors state() const = 0;
  // Restores state() output (any device; copied to the parameters' device). Throws
  // gridnn::Error listing every missing, unexpected or mis-shaped entry.
  virtual void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) = 0;

  int64_t steps() const { return steps_; }  // updates done so far
  const OptimizerOptions& options() const { return options_; }

 protected:
  Optimizer(OptimizerOptions options, ParameterList params) : options_(options), params_(std::move(params)) {}

  OptimizerOptions options_;
  ParameterList params_;
  int64_t steps_ = 0;
};

// Checks the options (a negative learning-rate factor, beta outside [0, 1), Nesterov
// without momentum or with dampening: gridnn::Error saying what to change).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, ParameterList params);

}  // namespace gridnn::optim
