// GridLayerFactory: which layer of models/dist/ stands in for which single-process one.
#include "models/dist/factory.h"

#include "models/dist/attention.h"
#include "models/dist/batch_split.h"
#include "models/dist/domain_parallel.h"
#include "models/dist/global_pool.h"
#include "models/dist/linear.h"
#include "models/dist/replicated.h"
#include "models/layers/batchnorm3d.h"

namespace gridnn::nn {

GridLayerFactory::GridLayerFactory(parallel::ProcessGrid& grid, std::string batch_split_from, parallel::HaloMode halo)
    : grid_(grid), batch_split_from_(std::move(batch_split_from)), halo_(halo) {
  if (!batch_split_from_.empty() && grid.shape().rows > 1)
    past_switch_.reset(new GridLayerFactory(grid, PastTheSwitch{}));  // a private constructor
}

GridLayerFactory::GridLayerFactory(parallel::ProcessGrid& grid, PastTheSwitch) : grid_(grid), batch_split_(true) {}

std::unique_ptr<Module> GridLayerFactory::replicated(std::unique_ptr<Module> layer, int64_t in_depth) const {
  return std::make_unique<Replicated>(grid_, std::move(layer), split(in_depth) ? in_depth : 0);
}

std::unique_ptr<Module> GridLayerFactory::on_batch_shard(std::unique_ptr<Module> layer) const {
  for (auto& [name, p] : layer->named_parameters()) p->layout.grad_sum_over = &grid_.stage_comm();
  return layer;
}

LayerFactory::BlockInput GridLayerFactory::block_input(const std::string& block, int64_t depth,
                                                       bool input_gradient) const {
  if (!past_switch_ || block != batch_split_from_) return {};
  auto s = std::make_unique<SplitBatch>(grid_.row(), split(depth) ? depth : 0);
  s->set_input_gradient(input_gradient);
  return {std::move(s), past_switch_.get()};
}

std::unique_ptr<Module> GridLayerFactory::conv3d(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                                 int64_t padding, bool bias, int64_t in_depth,
                                                 bool input_gradient) const {
  if (batch_split_)
    return on_batch_shard(LayerFactory::conv3d(in, out, kernel, stride, padding, bias, in_depth, input_gradient));
  if (split(in_depth) && split(window_output_depth(in_depth, kernel, stride, padding)))
    return domain_conv3d(grid_, in, out, {kernel, kernel, kernel}, {stride, stride, stride},
                         {padding, padding, padding}, bias, in_depth, input_gradient, "Conv3d", halo_);
  return replicated(LayerFactory::conv3d(in, out, kernel, stride, padding, bias, in_depth, input_gradient), in_depth);
}

std::unique_ptr<Module> GridLayerFactory::maxpool3d(int64_t kernel, int64_t stride, int64_t padding,
                                                    int64_t in_depth) const {
  if (batch_split_) return LayerFactory::maxpool3d(kernel, stride, padding, in_depth);
  if (split(in_depth) && split(window_output_depth(in_depth, kernel, stride, padding)))
    return domain_max_pool3d(grid_, {kernel, kernel, kernel}, {stride, stride, stride}, {padding, padding, padding},
                             in_depth);
  return replicated(LayerFactory::maxpool3d(kernel, stride, padding, in_depth), in_depth);
}

// Statistics over every rank that holds different values: the whole stage while the depth
// is split or after the switch to the batch split, the batch shards once the activation is
// replicated on the row.
std::unique_ptr<Module> GridLayerFactory::batchnorm3d(int64_t channels, int64_t depth,
                                                      ops::BnActivation activation) const {
  return std::make_unique<BatchNorm3d>(channels, 1e-5, 0.1, Device::cpu(),
                                       batch_split_ || split(depth) ? &grid_.stage_comm() : &grid_.col(), activation);
}

std::unique_ptr<Module> GridLayerFactory::attention(int64_t channels, int64_t depth) const {
  if (batch_split_) return on_batch_shard(LayerFactory::attention(channels, depth));
  if (split(depth)) return std::make_unique<DistSelfAttention3d>(grid_, channels, depth);
  return replicated(LayerFactory::attention(channels, depth), depth);
}

std::unique_ptr<Module> GridLayerFactory::global_avg_pool(int64_t positions, int64_t depth) const {
  if (batch_split_) return std::make_unique<GatherBatch>(grid_.row(), LayerFactory::global_avg_pool(positions, depth));
  if (split(depth)) return std::make_unique<DistGlobalAvgPool3d>(grid_.row(), positions);
  return LayerFactory::global_avg_pool(positions, depth);
}

std::unique_ptr<Module> GridLayerFactory::linear(int64_t in, int64_t out) const {
  if (grid_.row().size() > 1 && out >= grid_.row().size()) return std::make_unique<DistLinear>(grid_, in, out);
  return replicated(LayerFactory::linear(in, out), 0);
}

std::unique_ptr<Module> GridLayerFactory::whole_volume(int64_t depth) const {
  if (batch_split_ || !split(depth)) return nullptr;
  return std::make_unique<GatherDepth>(grid_.row(), depth);
}

}  // namespace gridnn::nn
