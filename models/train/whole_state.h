// The model's tensors as the single-process model holds them, on a grid that splits some of
// them into row blocks (the 1.5D DistLinear: nn::RowSplitParameters). Checkpoints and
// --dump-step hold whole tensors, so a run saved on one grid resumes on any other; loading
// cuts the whole tensors back into this rank's blocks.
//
//   WholeState whole(model);
//   whole.model_tensors()      parameters and buffers, whole      (collective over the rows)
//   whole.gradients()          each parameter's gradient, whole   (collective)
//   whole.optimizer_state(s)   "<param>.<what>" entries, whole    (collective)
//   whole.local(tensors)       model tensors or optimizer state, cut to this rank's blocks
//   whole.shape(name, t)       the whole shape of a model tensor or state entry
// Without split parameters every call returns the tensors as they are.
#pragma once

#include <map>
#include <string>

#include "core/safetensors.h"
#include "models/module.h"

namespace gridnn::train {

class WholeState {
 public:
  explicit WholeState(nn::Module& model);

  NamedTensors model_tensors();
  NamedTensors gradients();
  NamedTensors optimizer_state(const NamedTensors& state);
  std::map<std::string, Tensor> local(const std::map<std::string, Tensor>& whole) const;
  Shape shape(const std::string& name, const Tensor& local) const;

 private:
  // The split module holding a model tensor or state entry ("fc1.weight",
  // "fc1.weight.momentum_buffer"), or null.
  nn::RowSplitParameters* split_of(const std::string& name) const;

  nn::Module& model_;
  std::map<std::string, nn::RowSplitParameters*> split_;  // parameter name -> its module
};

}  // namespace gridnn::train
