// The parameter checks and buffer (de)serialization shared by the optimizers.
#include "models/optim/param_state.h"

#include <cmath>
#include <set>
#include <sstream>

namespace gridnn::optim::detail {

void check_parameters(const std::string& optimizer, const ParameterList& params) {
  GRIDNN_REQUIRE(!params.empty(), optimizer, ": no parameters to optimize; pass the model's named_parameters()");
  std::set<std::string> seen;
  for (const auto& [name, param] : params) {
    GRIDNN_REQUIRE(param != nullptr, optimizer, ": parameter '", name, "' is a null pointer");
    GRIDNN_REQUIRE(param->value.defined(), optimizer, ": parameter '", name, "' has no value; register it first");
    GRIDNN_REQUIRE(param->value.dtype() == DType::f32, optimizer, ": parameter '", name, "' is ", param->value.str(),
                   "; the optimizers update f32 (master) weights only");
    GRIDNN_REQUIRE(seen.insert(name).second, optimizer, ": parameter name '", name,
                   "' appears twice; every parameter needs a unique name (its state is saved under it)");
  }
}

void check_learning_rate(const std::string& optimizer, double lr) {
  GRIDNN_REQUIRE(std::isfinite(lr) && lr >= 0.0, optimizer, ": the learning rate must be finite and >= 0, got ", lr,
                 "; check the schedule");
}

void load_buffers(const std::string& optimizer, const std::vector<BufferSlot>& slots,
                  const std::map<std::string, Tensor>& tensors, int64_t steps) {
  GRIDNN_REQUIRE(steps >= 0, optimizer, " load_state: steps must be >= 0, got ", steps);
  std::vector<std::string> missing, unexpected, misshaped;
  std::set<std::string> expected;
  if (steps > 0) {
    for (const BufferSlot& slot : slots) {
      expected.insert(slot.name);
      auto it = tensors.find(slot.name);
      if (it == tensors.end()) {
        missing.push_back(slot.name);
        continue;
      }
      const Tensor& t = it->second;
      if (!t.defined() || t.dtype() != DType::f32 || t.shape() != slot.param->value.shape())
        misshaped.push_back(slot.name + " is " + (t.defined() ? t.str() : std::string("undefined")) + ", expected f32" +
                            slot.param->value.shape().str());
    }
  }
  for (const auto& [name, t] : tensors)
    if (!expected.count(name)) unexpected.push_back(name);

  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::ostringstream msg;
    msg << optimizer << " load_state: the state does not fit this optimizer's parameters (at step " << steps;
    if (steps == 0) msg << ", before any update: no buffers exist yet";
    msg << ")";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      msg << "; " << names.size() << " " << what << ": ";
      for (size_t i = 0; i < names.size(); ++i) msg << (i ? ", " : "") << names[i];
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("mis-shaped", misshaped);
    msg << ". Load a state saved by the same kind of optimizer over the same model";
    throw Error(msg.str());
  }
  for (const BufferSlot& slot : slots)
    *slot.tensor = steps > 0 ? tensors.at(slot.name).to(slot.param->value.device()) : Tensor();
}

}  // namespace gridnn::optim::detail
