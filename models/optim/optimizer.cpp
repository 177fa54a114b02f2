// make_optimizer: the kind by name.
#include "models/optim/optimizer.h"

#include "models/optim/adam.h"
#include "models/optim/sgd.h"

namespace gridnn::optim {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, ParameterList params) {
  if (options.kind == "sgd") return std::make_unique<Sgd>(options, std::move(params));
  if (options.kind == "adam" || options.kind == "adamw")
    return std::make_unique<Adam>(options, std::move(params));
  throw Error("make_optimizer: unknown optimizer kind '" + options.kind +
              "'; use sgd, adam or adamw");
}

}  // namespace gridnn::optim
