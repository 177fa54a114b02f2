// Adam and AdamW: torch.optim.Adam (L2 weight decay added to the gradient) and
// torch.optim.AdamW (decoupled decay of the weights), PyTorch 1.13, without amsgrad;
// one fused update per parameter (ops::adam_update in kernels/optim.h).
//
// State: "<param>.exp_avg" and "<param>.exp_avg_sq" for every parameter, created as
// zeros on the parameter's first update (load_state() wants both for every parameter once
// steps > 0). The bias corrections 1 - beta^t use the
// optimizer's step count t = steps() + 1. PyTorch counts steps per parameter; the two
// agree unless a parameter has no grad at some step (gridnn's layers always give every
// parameter one).
#pragma once

#include <vector>

#include "models/optim/optimizer.h"
#include "models/optim/param_state.h"

namespace gridnn::optim {

class Adam : public Optimizer {
 public:
  // AdamW when options.kind is adamw, else Adam. Checks beta1 and beta2 in [0, 1),
  // eps >= 0 and the parameters; a negative weight decay means 0 (Adam) or 1e-2 (AdamW).
  // Options of SGD (momentum, dampening, nesterov) are ignored.
  Adam(OptimizerOptions options, ParameterList params);

  // One update of every parameter with a grad (one whose grad is undefined is skipped:
  // value and moments stay as they are).
  void step(double lr) override;
  // The moments that exist (handles sharing the optimizer's storage; clone one to keep a
  // snapshot).
  NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) override;

  bool decoupled() const { return decoupled_; }

 private:
  const char* name() const { return decoupled_ ? "AdamW" : "Adam"; }
  std::vector<detail::BufferSlot> slots();

  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // per parameter, undefined until its first update
};

}  // namespace gridnn::optim
