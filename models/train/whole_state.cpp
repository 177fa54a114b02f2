// WholeState: whole tensors from row blocks and back (see whole_state.h).
#include "models/train/whole_state.h"

#include <unordered_map>

#include "models/train/checkpoint.h"

namespace gridnn::train {

WholeState::WholeState(nn::Module& model) : model_(model) {
  std::unordered_map<const nn::Parameter*, nn::RowSplitParameters*> owner;
  for (nn::Module* m : model.modules())
    if (auto* split = dynamic_cast<nn::RowSplitParameters*>(m))
      for (auto& [name, p] : m->named_parameters()) owner[p] = split;
  for (auto& [name, p] : model.named_parameters())
    if (auto it = owner.find(p); it != owner.end()) split_[name] = it->second;
}

nn::RowSplitParameters* WholeState::split_of(const std::string& name) const {
  if (split_.empty()) return nullptr;
  // The parameter's own name, or a state entry "<parameter>.<what>".
  if (auto it = split_.find(name); it != split_.end()) return it->second;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return nullptr;
  auto it = split_.find(name.substr(0, dot));
  return it == split_.end() ? nullptr : it->second;
}

NamedTensors WholeState::model_tensors() {
  NamedTensors out = train::model_tensors(model_);
  for (auto& [name, t] : out)
    if (auto* split = split_of(name)) t = split->gather_whole(t);
  return out;
}

NamedTensors WholeState::gradients() {
  NamedTensors out;
  for (auto& [name, p] : model_.named_parameters()) {
    auto* split = split_of(name);
    out.emplace_back(name, split ? split->gather_whole(p->grad) : p->grad);
  }
  return out;
}

NamedTensors WholeState::optimizer_state(const NamedTensors& state) {
  NamedTensors out = state;
  for (auto& [name, t] : out)
    if (auto* split = split_of(name)) t = split->gather_whole(t);
  return out;
}

std::map<std::string, Tensor> WholeState::local(const std::map<std::string, Tensor>& whole) const {
  std::map<std::string, Tensor> out = whole;
  for (auto& [name, t] : out)
    if (auto* split = split_of(name)) t = split->take_block(t);
  return out;
}

Shape WholeState::shape(const std::string& name, const Tensor& local_tensor) const {
  auto* split = split_of(name);
  return split ? split->whole_shape(local_tensor) : local_tensor.shape();
}

}  // namespace gridnn::train
