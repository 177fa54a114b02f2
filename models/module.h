// The layer API (Caffe-style, DESIGN §10): a Module computes forward(x), keeping what its
// backward needs, and backward(dy) returns dx. Activation gradients overwrite (backward
// returns a new tensor); parameter gradients accumulate (+=) until zero_grad().
//
// Parameters and buffers are registered by name; a container registers its children by
// name, so named_parameters() yields PyTorch state_dict names ("layer1.0.conv1.weight")
// and weights move to and from PyTorch unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/math_mode.h"

namespace gridnn::nn {

// Where a parameter's gradient is summed on a process grid (DESIGN §4). Each rank's
// backward leaves only its share of the gradient in `grad`; the trainer then all-reduces it
// over:
//   stage  every rank of the stage (weights replicated on the stage whose ranks see
//          different data: convolutions and batch norm on depth slabs and batch shards)
//   col    the ranks of other batch shards only (a row block of a 1.5D Linear, or a layer
//          whose ranks in a row compute the same gradient from replicated features)
enum class GradientReduction { stage, col };

// A learnable tensor and the gradient backward adds into (same shape, dtype, device).
struct Parameter {
  Tensor value;
  Tensor grad;
  GradientReduction reduction = GradientReduction::stage;
};

class Module;

// Learns when a module's backward has finished: Module::run_backward tells the observer
// installed on this thread (BackwardObserverScope) after each backward it runs. Then the
// parameter gradients of that module and of all its descendants are final for the step
// (GradientSync starts reducing them while backward goes on, DESIGN §4).
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void on_backward_done(Module& module) = 0;
};

// Installs `observer` on this thread for the scope's lifetime (the previous one after).
class BackwardObserverScope {
 public:
  explicit BackwardObserverScope(BackwardObserver& observer);
  ~BackwardObserverScope();
  BackwardObserverScope(const BackwardObserverScope&) = delete;
  BackwardObserverScope& operator=(const BackwardObserverScope&) = delete;
  static BackwardObserver* current();

 private:
  BackwardObserver* previous_;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // y for input x; keeps what backward needs (inputs, masks, statistics).
  virtual Tensor forward(const Tensor& x) = 0;
  // dL/dx for the last forward, given dL/dy; adds into the parameters' grad.
  virtual Tensor backward(const Tensor& dy) = 0;
  // backward(dy), then tells the current BackwardObserver (if any) that this module is done.
  // Containers run their children's backward through it, and trainers the root's: a
  // module run by plain backward() is reported with the nearest ancestor run through here.
  Tensor run_backward(const Tensor& dy);

  // This module's and its children's parameters and buffers, by state_dict name.
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  // This module and all its descendants, each parent before its children.
  std::vector<Module*> modules();

  void zero_grad();
  // Tells this module and every descendant its full state_dict name ("layer1.0.conv1"; the
  // root gets `name`): layers that communicate label their traffic with it (comm report).
  void name_modules(const std::string& name = "");
  // Called by name_modules.
  virtual void on_named(const std::string& /*name*/) {}
  // Moves every parameter (value and grad) and buffer to `device`; the Parameter and buffer
  // objects stay where they are, so pointers to them remain valid.
  void to(const Device& device);
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // The precision of this module's and its children's GEMMs and convolutions
  // (kernels/math_mode.h; default fp32, children added later inherit it). Conv3d, Linear,
  // PointwiseConv3d and SelfAttention3d use it; batch norm, softmax, pooling and losses
  // always compute in fp32, as do bias additions. Parameters and gradients stay fp32.
  void set_math_mode(ops::MathMode math);
  ops::MathMode math_mode() const { return math_; }

  // Draws every parameter from its PyTorch default initializer, keyed by (seed, full
  // parameter name), so the values do not depend on construction order or on the grid.
  void initialize(uint64_t seed);

 protected:
  // Registration, in the order PyTorch's state_dict lists them. Grads start at zero. A child
  // registered under the empty name lends its names unprefixed (a wrapper that adds
  // behaviour, not a level of the state_dict).
  Parameter& register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> child) {
    M& ref = *child;
    add_child(name, std::move(child));
    return ref;
  }

  // Leaves override this: draw own parameters; `prefix` is this module's full name with
  // a trailing dot ("layer1.0.conv1."), empty for the root.
  virtual void reset_parameters(uint64_t /*seed*/, const std::string& /*prefix*/) {}
  // Called after train()/eval() changed the mode (for children too).
  virtual void on_mode_change() {}
  // Called after to() moved the parameters and buffers (for children too): a layer with
  // scratch tensors of its own moves or reallocates them here.
  virtual void on_device_change(const Device& /*device*/) {}

  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const {
    return children_;
  }

 private:
  void add_child(const std::string& name, std::unique_ptr<Module> child);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>* params,
               std::vector<std::pair<std::string, Tensor*>>* buffers);
  void initialize_with_prefix(uint64_t seed, const std::string& prefix);
  void notify_device_change(const Device& device);
  static std::string child_prefix(const std::string& prefix, const std::string& name);

  // unique_ptr: addresses stay valid as more are registered.
  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
  ops::MathMode math_ = ops::MathMode::fp32;
};

// A module whose parameters are row blocks of larger tensors split over ranks (the 1.5D
// DistLinear of models/dist/): how the whole tensor — of a parameter, its gradient or
// optimizer state shaped like it — is made from this rank's block, and the block from the
// whole, so state_dicts and checkpoints hold what the single-process module holds
// (models/train/whole_state.h).
class RowSplitParameters {
 public:
  virtual ~RowSplitParameters() = default;
  // Collective over the ranks that hold the blocks.
  virtual Tensor gather_whole(const Tensor& block) = 0;
  // This rank's rows of `whole` (a copy; no communication).
  virtual Tensor take_block(const Tensor& whole) const = 0;
  virtual Shape whole_shape(const Tensor& block) const = 0;
};

// Children run in order; backward runs them in reverse. Children are named "0", "1", ...
// unless given names.
class Sequential : public Module {
 public:
  template <class M>
  M& add(std::unique_ptr<M> child, std::string name = "") {
    if (name.empty()) name = std::to_string(children().size());
    return register_module(name, std::move(child));
  }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
};

// Throws gridnn::Error "<layer>: <what>" unless `cond`: the shape and argument checks of
// every layer use it, so messages name the layer.
void require_layer(bool cond, const std::string& layer, const std::string& what);

}  // namespace gridnn::nn
