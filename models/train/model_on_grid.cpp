// ModelOnGrid: the model side of a training step on a grid.
#include "models/train/model_on_grid.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kernels/math_mode.h"
#include "models/dist/factory.h"
#include "models/train/checkpoint.h"
#include "models/train/grid_batch.h"
#include "models/train/whole_state.h"

namespace gridnn::train {

std::unique_ptr<nn::LayerFactory> layers_for(parallel::ProcessGrid& grid) {
  if (grid.shape().rows == 1 && grid.shape().cols == 1) return std::make_unique<nn::LayerFactory>();
  return std::make_unique<nn::GridLayerFactory>(grid);
}

ModelOnGrid::ModelOnGrid(const TrainOptions& o, parallel::ProcessGrid& grid)
    : grid_(grid), device_(Device::parse(o.device)), classes_(o.classes), layers_(layers_for(grid)) {
  require_device(device_);
  model_ = build_model(o, *layers_);
  model_->name_modules();  // labels of the communication report
  if (!o.init_from.empty()) load_model_tensors(*model_, read_weights(o.init_from), o.init_from);
  model_->to(device_);
  // Convolutions and GEMMs in the chosen math; parameters, gradients and optimizer state
  // stay fp32 (master weights). On the CPU, reduced modes are emulated (for tests).
  model_->set_math_mode(ops::parse_math_mode(o.precision));
  model_->train();
  GRIDNN_REQUIRE(o.placement.empty() || o.placement == "even" || grid.shape().stages > 1,
                 "--placement needs pipeline stages (--stages K or --grid PsxPrxPc)");
  // The smallest batch shard must hold a row of every micro-batch (the same check on every
  // rank, so that all of them stop alike).
  GRIDNN_REQUIRE(o.micro_batches == 1 || o.batch / grid.shape().cols >= o.micro_batches, "--micro-batches ", o.micro_batches,
                 " needs at least as many samples in every batch shard; --batch ", o.batch, " over ",
                 grid.shape().cols, " shards gives ", o.batch / grid.shape().cols,
                 "; lower --micro-batches or raise --batch");
  if (grid.shape().stages > 1 || o.micro_batches > 1) {
    auto* blocks = dynamic_cast<nn::BlockNetwork*>(model_.get());
    GRIDNN_REQUIRE(blocks, "pipeline stages and micro-batches need a network made of blocks (ResAttNet3D or MLP)");
    pipeline_ = std::make_unique<Pipeline>(*model_, grid, choose_placement(o, *blocks, grid), o.micro_batches);
    optimizer_ = optim::make_optimizer(o.optimizer, pipeline_->parameters());
  } else {
    optimizer_ = optim::make_optimizer(o.optimizer, model_->named_parameters());
  }
  set_gradient_sync(!pipeline_);
}

void ModelOnGrid::set_gradient_sync(bool overlap, int64_t bucket_bytes) {
  // A pipeline's backward runs block by block between messages: its gradients are summed
  // after it (the overlap follows the whole model's backward).
  overlap_ = overlap && !pipeline_;
  sync_ = pipeline_ ? std::make_unique<GradientSync>(pipeline_->parameters(), bucket_bytes)
                    : std::make_unique<GradientSync>(*model_, bucket_bytes);
}

NamedTensors ModelOnGrid::whole_model_tensors() {
  if (pipeline_) pipeline_->share_model();
  return train::whole_model_tensors(*model_);
}

NamedTensors ModelOnGrid::whole_gradients() {
  if (pipeline_) pipeline_->share_gradients();
  return train::whole_gradients(*model_);
}

namespace {
// The parameter an optimizer state entry "<param>.<what>" belongs to.
nn::Parameter* owner_of(const std::map<std::string, nn::Parameter*>& params, const std::string& entry) {
  const size_t dot = entry.rfind('.');
  auto it = dot == std::string::npos ? params.end() : params.find(entry.substr(0, dot));
  return it == params.end() ? nullptr : it->second;
}
}  // namespace

NamedTensors ModelOnGrid::whole_optimizer_state() {
  NamedTensors state = pipeline_ ? pipeline_->full_optimizer_state(*optimizer_) : optimizer_->state();
  std::map<std::string, nn::Parameter*> params;
  for (auto& [name, p] : model_->named_parameters()) params[name] = p;
  for (auto& [name, t] : state)
    if (nn::Parameter* p = owner_of(params, name)) t = whole_of(*p, t);
  return state;
}

std::map<std::string, Tensor> ModelOnGrid::own_optimizer_state(const std::map<std::string, Tensor>& whole) const {
  std::map<std::string, nn::Parameter*> params;
  for (auto& [name, p] : model_->named_parameters()) params[name] = p;
  std::map<std::string, Tensor> all = whole;
  for (auto& [name, t] : all)
    if (nn::Parameter* p = owner_of(params, name)) t = part_of(*p, t);
  if (!pipeline_) return all;
  std::map<std::string, Tensor> own;
  for (auto& [name, p] : pipeline_->parameters()) {
    const std::string prefix = name + ".";
    for (auto it = all.lower_bound(prefix); it != all.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      own.insert(*it);
  }
  return own;
}

double ModelOnGrid::forward_backward(const data::Batch& shard, int64_t global_rows, Tensor* logits) {
  model_->train();
  if (pipeline_) {
    using Clock = std::chrono::steady_clock;
    const auto begin = Clock::now();
    const double loss = pipeline_->forward_backward(shard, global_rows, loss_, logits);
    if (!std::isfinite(loss)) return loss;
    const auto start = Clock::now();
    // The whole GPipe schedule (forwards, recomputation, backwards, transfers).
    timing_.backward_seconds = std::chrono::duration<double>(start - begin).count();
    sync_->reduce();
    timing_.sync_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return loss;
  }
  *logits = model_->forward(shard.x.to(device_));
  double loss;
  {
    parallel::CommLayerScope scope("loss");
    loss_.forward(*logits, shard.y.to(device_));
    loss = sum_over_batch(grid_, loss_.loss_sum()) / double(global_rows);
  }
  if (!std::isfinite(loss)) return loss;  // the caller reports it; nothing was changed
  model_->zero_grad();
  const Tensor dlogits = loss_.backward(global_rows);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  if (overlap_) {
    sync_->begin();
    {
      nn::BackwardObserverScope watch(*sync_);  // buckets start as their layers finish
      model_->run_backward(dlogits);
    }
    timing_.backward_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    sync_->finish();
  } else {
    model_->run_backward(dlogits);
    timing_.backward_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    sync_->reduce();
  }
  timing_.sync_seconds =
      std::chrono::duration<double>(Clock::now() - start).count() - timing_.backward_seconds;
  return loss;
}

double ModelOnGrid::evaluate(const data::Batch& shard, Tensor* logits) {
  // The last validation batch may leave a batch shard empty; the whole row then skips it
  // together (its ranks share the shard), so no collective is left waiting.
  if (shard.x.size(0) == 0) {
    *logits = Tensor::empty({0, classes_});
    return 0.0;
  }
  model_->eval();
  double loss_sum;
  if (pipeline_) {
    loss_sum = pipeline_->evaluate(shard, loss_, logits);
  } else {
    *logits = model_->forward(shard.x.to(device_));
    loss_.forward(*logits, shard.y.to(device_));
    loss_sum = loss_.loss_sum();
  }
  model_->train();
  return loss_sum;
}

}  // namespace gridnn::train
