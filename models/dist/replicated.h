// Where depth slabs end: layers run whole, replicated on every rank of the grid's row
// (docs/design.md §4).
//
// Once an activation is thinner than Pr planes (ResAttNet's last stages at small inputs),
// its depth is no longer split: GatherDepth all-gathers the slabs over the row, and the
// layers after it run on the whole volume on every row rank — the gather <-> own-block pair
// of parallel/mappings.h (the replicated layers compute the same gradient on every row rank,
// so backward keeps its own planes without communication).
//
// Replicated wraps such a layer (registered under the wrapper's own name, so its parameters
// keep theirs): its input gathered first when it arrives in slabs (labelled "<name>
// (gather)"), and its parameters' gradients summed over the batch shards only (col): every
// rank of a row holds the same values and computes the same gradient from the same data.
#pragma once

#include <memory>

#include "models/layers/module.h"
#include "parallel/mappings.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

// [B, C, own planes, H, W] -> [B, C, D, H, W] on every rank of the row, and back. Its
// traffic goes under the caller's CommLayerScope.
class GatherDepth : public Module {
 public:
  // The row splits `global_depth` planes (balanced); it must outlive the module.
  GatherDepth(parallel::Communicator& row, int64_t global_depth);

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;
  // describe() with the calls labelled `label`.
  Shape describe_as(const std::string& label, const Shape& input, plan::RankStep& step) const;

 private:
  Tensor do_backward(const Tensor& dy) override;

  parallel::BlockSplit split_;  // along depth (dimension 2)
};

class Replicated : public Module {
 public:
  // in_depth: the layer's global input depth when its input arrives split over the row (it
  // is gathered first), 0 when it arrives whole.
  Replicated(parallel::ProcessGrid& grid, std::unique_ptr<Module> layer, int64_t in_depth = 0);

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;  // undefined when the layer returns none

  std::unique_ptr<GatherDepth> gather_;  // null: the input arrives whole
  Module* layer_;
};

}  // namespace gridnn::nn
