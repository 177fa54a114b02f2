// The layers of a process grid (DESIGN §4) for networks built through nn::LayerFactory:
// convolutions and pooling split by depth over the grid's rows (halo exchange), synchronized
// batch norm over the stage, self-attention with keys and values gathered over the row, the
// global pooling as the hand-over to replicated features, and the classifier on replicated
// features (its gradient summed over the batch shards only).
//
// An activation of depth d is split over the Pr rows while d >= Pr (every rank owns a
// plane). A layer whose output would be thinner gathers its input first (GatherDepth) and
// runs replicated on every rank of the row, as does everything after it; replicated layers'
// gradients are summed over the batch shards only, and their batch norms synchronize over
// the col communicator. So any input runs on any Pr up to its depth, and the result is the
// 1x1 run's.
#pragma once

#include "models/nets/layer_factory.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class GridLayerFactory : public LayerFactory {
 public:
  explicit GridLayerFactory(parallel::ProcessGrid& grid) : grid_(grid) {}

  std::unique_ptr<Module> conv3d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                 bool bias, int64_t in_depth, bool input_gradient = true) const override;
  std::unique_ptr<Module> batchnorm3d(int64_t channels, int64_t depth) const override;
  std::unique_ptr<Module> maxpool3d(int64_t kernel, int64_t stride, int64_t padding,
                                    int64_t in_depth) const override;
  std::unique_ptr<Module> attention(int64_t channels, int64_t depth) const override;
  std::unique_ptr<Module> global_avg_pool(int64_t positions, int64_t depth) const override;
  std::unique_ptr<Module> linear(int64_t in, int64_t out) const override;
  std::unique_ptr<Module> whole_volume(int64_t depth) const override;

 private:
  // Whether an activation of this (global) depth is split over the rows.
  bool split(int64_t depth) const { return grid_.shape().rows > 1 && depth >= grid_.shape().rows; }
  // A layer replicated on the row: gathers a split input first; its gradients are summed
  // over the batch shards only.
  std::unique_ptr<Module> replicated(std::unique_ptr<Module> layer, int64_t in_depth) const;
  parallel::ProcessGrid& grid_;
};

}  // namespace gridnn::nn
