// The layers of a process grid (docs/design.md §4) for networks built through
// nn::LayerFactory: which distributed form of models/dist/ stands in for each
// single-process layer. The layers themselves state their distribution (what they split
// over which axis, their halo, whom their gradients are summed over); this factory only
// chooses, by the activation's depth:
//
//   an activation of global depth d is split over the Pr rows while d >= Pr > 1 (every rank
//   owns a plane): convolution and pooling domain-parallel (DomainParallel), batch norm
//   synchronized over the stage, attention with keys and values gathered over the row,
//   global pooling the hand-over to replicated features;
//   a layer whose output would be thinner gathers its input first and runs replicated on
//   every rank of the row (Replicated), as does everything after it (batch norm then
//   synchronized over the batch shards, col);
//   fully connected layers on replicated features: 1.5D (DistLinear) with Pr > 1 row ranks
//   and at least Pr outputs, else replicated.
// So any input runs on any Pr up to its depth, and the result is the 1x1 run's.
//
// With a switch block (--batch-split-from, models/dist/batch_split.h), the row splits the
// batch instead from that block's input on: SplitBatch there, then the single-process layers
// on B/Pr samples (gradients and batch-norm statistics summed over the stage), and global
// pooling followed by GatherBatch, so the head sees replicated features as without it.
#pragma once

#include <memory>
#include <string>

#include "models/nets/layer_factory.h"
#include "parallel/halo.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

// The rule above: whether an activation of global depth `depth` is split over `rows` row
// ranks (else it is whole on every rank of the row).
inline bool depth_is_split(int64_t depth, int rows) { return rows > 1 && depth >= rows; }

class GridLayerFactory : public LayerFactory {
 public:
  // `batch_split_from`: the block whose input switches the row to the batch split (empty:
  // none; no switch either with one row). `halo`: how depth-split convolutions meet their
  // halo exchange (DomainParallel).
  explicit GridLayerFactory(parallel::ProcessGrid& grid, std::string batch_split_from = "",
                            parallel::HaloMode halo = parallel::HaloMode::blocking);

  std::unique_ptr<Module> conv3d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool bias,
                                 int64_t in_depth, bool input_gradient = true) const override;
  std::unique_ptr<Module> batchnorm3d(int64_t channels, int64_t depth, ops::BnActivation activation) const override;
  std::unique_ptr<Module> maxpool3d(int64_t kernel, int64_t stride, int64_t padding, int64_t in_depth) const override;
  std::unique_ptr<Module> attention(int64_t channels, int64_t depth) const override;
  std::unique_ptr<Module> global_avg_pool(int64_t positions, int64_t depth) const override;
  std::unique_ptr<Module> linear(int64_t in, int64_t out) const override;
  std::unique_ptr<Module> whole_volume(int64_t depth) const override;
  BlockInput block_input(const std::string& block, int64_t depth, bool input_gradient = true) const override;

 private:
  // Whether an activation of this (global) depth is split over the rows.
  bool split(int64_t depth) const { return depth_is_split(depth, grid_.shape().rows); }
  // `layer` run whole on every rank of the row, its input gathered first when split.
  std::unique_ptr<Module> replicated(std::unique_ptr<Module> layer, int64_t in_depth) const;
  // `layer` run on this rank's samples after the switch: its gradients summed over the stage.
  std::unique_ptr<Module> on_batch_shard(std::unique_ptr<Module> layer) const;
  // The factory of the layers past the switch: each rank of a row runs whole volumes of its
  // samples.
  struct PastTheSwitch {};
  GridLayerFactory(parallel::ProcessGrid& grid, PastTheSwitch);

  parallel::ProcessGrid& grid_;
  std::string batch_split_from_;
  parallel::HaloMode halo_ = parallel::HaloMode::blocking;
  const bool batch_split_ = false;                       // this one makes the layers past the switch
  std::unique_ptr<const GridLayerFactory> past_switch_;  // those layers' factory (null: no switch)
};

}  // namespace gridnn::nn
