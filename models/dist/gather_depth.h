// GatherDepth: the hand-over from depth slabs to a replicated volume, where a network's
// activations have become too thin to split over the grid's rows (fewer depth planes than
// Pr: ResAttNet's last stages at small inputs). Forward all-gathers the slabs over the row
// communicator; backward is the pair of that all-gather for a replicated tensor: every rank
// already holds the whole gradient, so it keeps its own planes (no communication).
#pragma once

#include "models/module.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class GatherDepth : public Module {
 public:
  // `row` splits `global_depth` planes (balanced, DESIGN §4); it must outlive the layer.
  GatherDepth(parallel::Communicator& row, int64_t global_depth);

  Tensor forward(const Tensor& x) override;    // [B, C, own planes, H, W] -> [B, C, D, H, W]
  Tensor backward(const Tensor& dy) override;  // [B, C, D, H, W] -> [B, C, own planes, H, W]
  void on_named(const std::string& name) override { label_ = name + " (gather)"; }

 private:
  std::string label_ = "GatherDepth";
  parallel::Communicator& row_;
  int64_t depth_;
  parallel::Range own_;
};

// A layer that runs on the whole volume, replicated on the row, fed by depth slabs: gathers
// them first. Its parameters keep the layer's own names (no extra level).
class Handover : public Module {
 public:
  Handover(parallel::Communicator& row, int64_t global_depth, std::unique_ptr<Module> layer);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;  // undefined when the layer returns none
  void on_named(const std::string& name) override { gather_.on_named(name); }

 private:
  GatherDepth gather_;
  Module* layer_;
};

// [B, C, D, H, W] <-> [D, B, C, H, W] (host copies): the layout in which depth slabs stack
// along dimension 0, as the communicators gather.
Tensor depth_major(const Tensor& x);
Tensor depth_minor(const Tensor& x);

}  // namespace gridnn::nn
