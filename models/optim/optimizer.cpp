// make_optimizer: the optimizer of the options' kind.
#include "models/optim/optimizer.h"

#include "models/optim/adam.h"
#include "models/optim/sgd.h"

namespace gridnn::optim {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, ParameterList params) {
  if (options.kind == OptimizerKind::sgd) return std::make_unique<Sgd>(options, std::move(params));
  return std::make_unique<Adam>(options, std::move(params));
}

}  // namespace gridnn::optim
