// SGD with momentum, dampening, Nesterov momentum and L2 weight decay: torch.optim.SGD
// (PyTorch 1.13), one fused update per parameter (ops::sgd_update in kernels/optim.h).
//
// State: "<param>.momentum_buffer" for every parameter when momentum != 0, created on the
// parameter's first update as a copy of its first (decayed) gradient, as PyTorch does;
// no state at all when momentum == 0. A parameter that has never had a grad has no buffer
// yet, and load_state() wants every parameter's buffer once steps > 0 (gridnn's layers
// give every parameter a grad, so this only concerns hand-built parameter lists).
#pragma once

#include <vector>

#include "models/optim/optimizer.h"
#include "models/optim/param_state.h"

namespace gridnn::optim {

class Sgd : public Optimizer {
 public:
  // Checks the SGD options (momentum >= 0, dampening in [0, 1], Nesterov only with
  // momentum > 0 and dampening 0) and the parameters; a negative weight decay means 0.
  // Options of Adam (betas, eps) are ignored.
  Sgd(OptimizerOptions options, ParameterList params);

  // p -= lr * d for every parameter with a grad (one whose grad is undefined is skipped:
  // value and buffer stay as they are).
  void step(double lr) override;
  // The momentum buffers that exist (handles sharing the optimizer's storage; clone one
  // to keep a snapshot).
  NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) override;

 private:
  std::vector<detail::BufferSlot> slots();  // momentum buffers (none when momentum == 0)

  std::vector<Tensor> momentum_buffers_;  // per parameter, undefined until its first update
};

}  // namespace gridnn::optim
