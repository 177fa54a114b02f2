// Global average pooling of depth slabs (docs/design.md §4): [B, C, D_r, H, W] slab -> [B, C]
// features, replicated on every rank of the row from here on.
//
//   forward   partial sums over this rank's positions, then the all-reduce <-> copy pair of
//             parallel/mappings.h: all_reduce over the row (B C elements), / N (N = D H W of
//             the whole volume)
//   backward  dx = dy / N broadcast over this rank's positions: no communication, because dy
//             is the same on every rank of the row (the layers after it are replicated)
// No parameters. Labelled with the layer's name ("GlobalAvgPool3d" until named).
#pragma once

#include <cstdint>

#include "models/layers/module.h"
#include "parallel/communicator.h"

namespace gridnn::nn {

class DistGlobalAvgPool3d : public Module {
 public:
  // global_positions: D H W of the whole volume. The row must outlive the layer.
  DistGlobalAvgPool3d(parallel::Communicator& row, int64_t global_positions);

  Tensor forward(const Tensor& x) override;  // [B, C, D_r, H, W] -> [B, C] (replicated)
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;  // [B, C] -> [B, C, D_r, H, W]

  parallel::Communicator& row_;
  int64_t global_positions_;
  Shape input_shape_;
};

}  // namespace gridnn::nn
