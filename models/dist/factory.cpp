// GridLayerFactory: which layer of models/dist/ stands in for which single-process one.
#include "models/dist/factory.h"

#include "models/dist/attention.h"
#include "models/dist/batchnorm3d.h"
#include "models/dist/conv3d.h"
#include "models/dist/gather_depth.h"
#include "models/dist/global_pool.h"
#include "models/dist/linear.h"
#include "models/dist/pool3d.h"

namespace gridnn::nn {

std::unique_ptr<Module> GridLayerFactory::replicated(std::unique_ptr<Module> layer, int64_t in_depth) const {
  for (auto& [name, p] : layer->named_parameters()) p->reduction = GradientReduction::col;
  if (!split(in_depth)) return layer;
  return std::make_unique<Handover>(grid_.row(), in_depth, std::move(layer));
}

std::unique_ptr<Module> GridLayerFactory::conv3d(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                                 int64_t padding, bool bias, int64_t in_depth,
                                                 bool input_gradient) const {
  const int64_t out_depth = window_output_depth(in_depth, kernel, stride, padding);
  if (split(in_depth) && split(out_depth)) {
    auto conv = std::make_unique<DistConv3d>(grid_.row(), in, out, kernel, stride, padding, bias, in_depth,
                                             "conv k" + std::to_string(kernel) + " s" + std::to_string(stride));
    conv->set_input_gradient(input_gradient);
    return conv;
  }
  return replicated(LayerFactory::conv3d(in, out, kernel, stride, padding, bias, in_depth, input_gradient),
                    in_depth);
}

std::unique_ptr<Module> GridLayerFactory::maxpool3d(int64_t kernel, int64_t stride, int64_t padding,
                                                    int64_t in_depth) const {
  if (split(in_depth) && split(window_output_depth(in_depth, kernel, stride, padding)))
    return std::make_unique<DistMaxPool3d>(grid_.row(), kernel, stride, padding, in_depth, "maxpool");
  return replicated(LayerFactory::maxpool3d(kernel, stride, padding, in_depth), in_depth);
}

// Statistics over every rank that holds different values: the whole stage while the depth
// is split, the batch shards once the activation is replicated on the row.
std::unique_ptr<Module> GridLayerFactory::batchnorm3d(int64_t channels, int64_t depth) const {
  if (split(depth)) return std::make_unique<SyncBatchNorm3d>(grid_.stage_comm(), channels);
  auto bn = std::make_unique<SyncBatchNorm3d>(grid_.col(), channels);
  for (auto& [name, p] : bn->named_parameters()) p->reduction = GradientReduction::col;
  return bn;
}

std::unique_ptr<Module> GridLayerFactory::attention(int64_t channels, int64_t depth) const {
  if (split(depth)) return std::make_unique<DistSelfAttention3d>(grid_.row(), channels, depth);
  return replicated(LayerFactory::attention(channels, depth), depth);
}

std::unique_ptr<Module> GridLayerFactory::global_avg_pool(int64_t positions, int64_t depth) const {
  if (split(depth)) return std::make_unique<DistGlobalAvgPool3d>(grid_.row(), positions);
  return LayerFactory::global_avg_pool(positions, depth);
}

// Fully connected layers see replicated features. With several row ranks and at least one
// output per rank, 1.5D (DESIGN §4): rank r holds row block r of W and b, the Y blocks are
// all-gathered over the row, dX all-reduced over it, and the blocks' gradients summed over
// the batch shards (col). Otherwise every rank of a row holds the whole layer and computes
// the same gradient: summed over the batch shards only.
std::unique_ptr<Module> GridLayerFactory::linear(int64_t in, int64_t out) const {
  std::unique_ptr<Module> fc;
  if (grid_.row().size() > 1 && out >= grid_.row().size())
    fc = std::make_unique<DistLinear>(grid_.row(), in, out);
  else
    fc = LayerFactory::linear(in, out);
  for (auto& [name, p] : fc->named_parameters()) p->reduction = GradientReduction::col;
  return fc;
}

std::unique_ptr<Module> GridLayerFactory::whole_volume(int64_t depth) const {
  if (!split(depth)) return nullptr;
  return std::make_unique<GatherDepth>(grid_.row(), depth);
}

}  // namespace gridnn::nn
