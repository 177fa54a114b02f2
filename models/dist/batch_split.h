// The switch from the depth split to the batch split over the grid's row (docs/design.md §4,
// "a distribution per layer"; Dryden et al.'s spatial-then-sample distribution).
//
// Early layers hold large volumes and few channels, so splitting the depth over the row pays;
// late layers hold few planes (3 at 96³ after layer4's stride), where a depth split leaves the
// row's ranks unbalanced and gathering attention's keys costs more than it saves. From a block
// boundary chosen by the user or the cost model (--batch-split-from), the Pr ranks of a row
// hold whole volumes of an equal share of the row's samples instead:
//
//   SplitBatch   forward: depth slabs of every sample [B, C, D_r, H, W] -> every plane of
//                this rank's samples [B/Pr, C, D, H, W] (B a multiple of Pr; the all-to-all pair of
//                parallel/mappings.h); an input already whole on the row keeps its own
//                samples (the own-block <-> gather pair, reversed).
//                backward: the transpose of either.
//   GatherBatch  the layer that ends the volumes (global pooling) on this rank's samples, its
//                output all-gathered over the row so that the head sees the row's whole shard
//                replicated, as after DistGlobalAvgPool3d; backward keeps this rank's rows
//                (the head's gradient is the same on every rank of the row).
//
// The layers between run the single-process layers on B/Pr samples; their parameters'
// gradients are summed over the whole stage, and batch norm's statistics too (every rank of
// the stage holds different samples). Data only moves, so the result is the 1x1 run's up to
// the order of the sums (the grid tests' tolerance).
#pragma once

#include <cstdint>
#include <memory>

#include "models/layers/module.h"
#include "parallel/communicator.h"
#include "parallel/mappings.h"

namespace gridnn::nn {

class SplitBatch : public Module {
 public:
  // `split_depth`: the global depth of the input when it arrives in depth slabs over the row,
  // 0 when it arrives whole on every rank of the row. The row must outlive the module.
  SplitBatch(parallel::Communicator& row, int64_t split_depth);

  Tensor forward(const Tensor& x) override;  // -> [B/Pr, C, D, H, W]
  Shape describe(const Shape& input, plan::RankStep& step) const override;
  // false: the layers before it take no gradient (the switch at the network's input), so
  // backward returns none and moves nothing.
  void set_input_gradient(bool on) { input_gradient_ = on; }

 private:
  Tensor do_backward(const Tensor& dy) override;
  // The row's split of `batch` samples (dimension 0) and of the depth (dimension 2).
  parallel::BlockSplit samples(int64_t batch) const;
  parallel::BlockSplit planes() const;
  void check_batch(int64_t batch) const;

  parallel::Communicator& row_;
  int64_t split_depth_;
  int64_t batch_ = 0;  // of the last forward
  bool input_gradient_ = true;
};

class GatherBatch : public Module {
 public:
  // `layer` runs on this rank's samples; the row must outlive the module.
  GatherBatch(parallel::Communicator& row, std::unique_ptr<Module> layer);

  Tensor forward(const Tensor& x) override;  // [B/Pr, ...] -> layer -> [B, ...] on the row
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;

  parallel::Communicator& row_;
  Module* layer_;
};

}  // namespace gridnn::nn
