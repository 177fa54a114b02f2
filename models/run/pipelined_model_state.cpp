// A pipelined model's training state as one process holds it, and back (pipelined_model.h):
// the stages exchange their partitions, row blocks are gathered (whole_state.h).
#include <algorithm>
#include <map>

#include "core/error.h"
#include "models/run/pipelined_model.h"
#include "models/run/whole_state.h"

namespace gridnn::run {

namespace {

// The parameter an optimizer state entry "<param>.<what>" belongs to, and its kind.
struct Entry {
  std::string parameter, kind;
};
Entry entry_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  GRIDNN_REQUIRE(dot != std::string::npos && dot + 1 < name.size(), "optimizer state '", name,
                 "' is not named <parameter>.<what>");
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

TrainingState PipelinedModel::state_dict() { return {model_state(), optimizer_state(), optimizer_->steps()}; }

NamedTensors PipelinedModel::model_state() {
  // Every stage receives every partition's parameters and buffers from its owner.
  if (stages() > 1)
    for (auto& [name, t] : model_tensors(*model_)) {
      Tensor view = t;  // shares the storage: the broadcast writes into the model
      grid_.pipe().broadcast(view, group_of(partition_of_block(net_->block_of(name))));
    }
  return whole_model_tensors(*model_);
}

NamedTensors PipelinedModel::optimizer_state() {
  parallel::Communicator& pipe = grid_.pipe();
  const bool staged = stages() > 1;

  // The optimizer's state: the kinds each parameter has ("momentum_buffer"; "exp_avg",
  // "exp_avg_sq"), the same on every stage (same options, same steps), then each
  // parameter's from its partition's owner, whole.
  const NamedTensors own = optimizer_->state();
  std::vector<std::string> kinds;
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : own) {
    const std::string kind = entry_of(name).kind;
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
    by_name.emplace(name, t);
  }
  if (staged) {
    Tensor count = Tensor::from_vector(std::vector<int64_t>{int64_t(kinds.size()), -int64_t(kinds.size())}, Shape{2});
    pipe.all_reduce(count, parallel::ReduceOp::max);
    GRIDNN_REQUIRE(count.data<int64_t>()[0] == -count.data<int64_t>()[1],
                   "pipeline: the stages' optimizers hold different kinds of state; they must take the same steps");
  }
  NamedTensors state;
  for (auto& [name, p] : model_->named_parameters()) {
    const bool owned = mine(name);
    for (const std::string& kind : kinds) {
      const std::string key = name + "." + kind;
      auto it = by_name.find(key);
      GRIDNN_REQUIRE(!owned || it != by_name.end(), "the optimizer has no '", key, "' though other parameters have '",
                     kind, "'; the stages must hold the same kinds of state");
      Tensor t = owned ? it->second : Tensor();
      if (staged) {
        t = owned ? t.clone() : Tensor::zeros(p->value.shape(), DType::f32, p->value.device());
        pipe.broadcast(t, group_of(partition_of_block(net_->block_of(name))));
      }
      state.emplace_back(key, whole_of(*p, t));
    }
  }
  return state;
}

void PipelinedModel::load_state_dict(const TrainingState& state, const std::string& source) {
  load_model_tensors(*model_, std::map<std::string, Tensor>(state.model.begin(), state.model.end()), source);
  // This partition's parameters' entries, cut to this rank's parts.
  std::map<std::string, nn::Parameter*> params;
  for (auto& [name, p] : partition_parameters()) params.emplace(name, p);
  std::map<std::string, Tensor> own;
  for (const auto& [name, t] : state.optimizer) {
    auto it = params.find(entry_of(name).parameter);
    if (it != params.end()) own.emplace(name, part_of(*it->second, t));
  }
  optimizer_->load_state(own, state.optimizer_steps);
}

NamedTensors PipelinedModel::gradients() {
  if (stages() > 1)
    for (auto& [name, p] : model_->named_parameters())
      grid_.pipe().broadcast(p->grad, group_of(partition_of_block(net_->block_of(name))));
  return whole_gradients(*model_);
}

}  // namespace gridnn::run
