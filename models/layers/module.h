// The layer API (Caffe-style, docs/design.md §10): a Module computes forward(x), keeping what its
// backward needs, and backward(dy) returns dx. Activation gradients overwrite (backward
// returns a new tensor); parameter gradients accumulate (+=) until zero_grad(). A module
// writes its backward as do_backward, which only Module::backward can call, so every backward
// that runs, a container's children's included, is reported to the BackwardObserver.
//
// Parameters and buffers are registered by name; a container registers its children by
// name, so named_parameters() yields PyTorch state_dict names ("layer1.0.conv1.weight")
// and weights move to and from PyTorch unchanged.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/size_class.h"
#include "core/tensor.h"
#include "kernels/math_mode.h"
#include "kernels/random.h"
#include "parallel/communicator.h"
#include "plan/cost_model.h"

namespace gridnn::nn {

// How a parameter lies on a process grid, declared by the layer that owns it (each layer
// of models/dist/ states its distribution; docs/design.md §4). On one process every field
// keeps its default.
struct ParameterLayout {
  // Whole on every rank (null), or dimension `split_dim` split in balanced blocks over the
  // ranks of `split_over` (the 1.5D Linear's row blocks): this rank holds slices [first,
  // first + value.size(split_dim)) of the whole tensor's `whole` along it. Checkpoints hold
  // the whole tensor.
  parallel::Communicator* split_over = nullptr;
  int split_dim = 0;
  int64_t whole = 0, first = 0;
  // The ranks whose gradients of this parameter are summed after backward: those that hold
  // it and computed their part of its gradient from different data (null: none, one
  // process). Depth slabs and batch shards sum over the stage; a layer replicated on the
  // row, and a row block, over the batch shards (col).
  parallel::Communicator* grad_sum_over = nullptr;
};

// A learnable tensor and the gradient backward adds into (same shape, dtype, device).
struct Parameter {
  Tensor value;
  Tensor grad;
  ParameterLayout layout = {};
};

class Module;

// Learns when a module's backward has finished: Module::backward tells the observer installed
// on this thread (BackwardObserverScope) after each backward it runs. Then the parameter
// gradients of that module and of all its descendants are final for the step (GradientSync
// starts reducing them while backward goes on, docs/design.md §4).
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
  // dL/dx for the last forward, given dL/dy (do_backward), then tells the current
  // BackwardObserver (if any) that this module is done. The one way to run a module's
  // backward: a container running its children's reports each as it finishes. dy is taken
  // by value: a caller that passes it with std::move (or as a temporary) and keeps no other
  // handle gives it up, and a layer whose dx is element-wise in dy may write dx over it
  // (nn::BatchNorm3d; the container states it, plan::LayerMemory::grad_in_place).
  Tensor backward(Tensor dy);

  // This module's and its children's parameters and buffers, by state_dict name.
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  // This module and all its descendants, each parent before its children.
  std::vector<Module*> modules();

  void zero_grad();
  // Lets go of what the last forward kept for a backward that will not come (after an
  // evaluation forward): this module's and its descendants' saved tensors (drop_saved).
  void release_saved();
  // Tells this module and every descendant its full state_dict name ("layer1.0.conv1"; the
  // root gets `name`). Errors, the communication report (CommLayerScope) and the cost
  // model's layers go by it.
  void name_modules(const std::string& name = "");
  // The full name, or before name_modules the layer's kind ("BatchNorm3d").
  const std::string& name() const { return name_; }

  // What one training step of this module computes and communicates, for the cost model
  // (plan/cost_model.h, docs/design.md §6): given the shape of its input as one process
  // would see it for this rank's samples ([b, C, D, H, W], b the batch shard's samples),
  // appends its layers (the whole layer's shape and the share of it this rank computes)
  // and this rank's collectives, in the order they run, to `step`, and returns its
  // output's shape. Layers describe themselves beside their forward and backward; a
  // parameter-free module without children passes its input through unrecorded.
  virtual Shape describe(const Shape& input, plan::RankStep& step) const;
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
  // parameter name, element index in the whole tensor), so the values do not depend on
  // construction order or on the grid.
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

  // A module named `kind` until name_modules names it.
  explicit Module(std::string kind) : name_(std::move(kind)) {}
  // Leaves override this: draw own parameters; `prefix` is this module's full name with
  // a trailing dot ("layer1.0.conv1."), empty for the root.
  virtual void reset_parameters(uint64_t /*seed*/, const std::string& /*prefix*/) {}
  // The random key of parameter `p` (registered as prefix + name): its values are those
  // of the whole tensor's elements, also when this rank holds a row block of it.
  static ops::RandomKey parameter_key(uint64_t seed, const std::string& prefix, const std::string& name,
                                      const Parameter& p);
  // Frees what this module's last forward kept for its backward (release_saved; a module
  // that keeps tensors overrides it, as does a container with modules it does not register).
  virtual void drop_saved() {}
  // Called after train()/eval() changed the mode (for children too).
  virtual void on_mode_change() {}
  // Called after to() moved the parameters and buffers (for children too): a layer with
  // scratch tensors of its own moves or reallocates them here.
  virtual void on_device_change(const Device& /*device*/) {}

  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const { return children_; }

 private:
  // The module's own backward, run by backward(): dL/dx for the last forward, given dL/dy;
  // adds into the parameters' grad. Private here and in every module, so that nothing can
  // run it around the observer (a child's, run directly, would start no gradient bucket).
  virtual Tensor do_backward(const Tensor& dy) = 0;

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
  std::string name_;
  bool training_ = true;
  ops::MathMode math_ = ops::MathMode::fp32;
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
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;
};

// A mark on the forwards the calling thread runs for the scope's lifetime (the previous state
// after); `Tag` names the mark.
template <class Tag>
class ForwardScope {
 public:
  ForwardScope() : previous_(flag()) { flag() = true; }
  ~ForwardScope() { flag() = previous_; }
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;
  static bool active() { return flag(); }

 private:
  static bool& flag() {
    thread_local bool on = false;
    return on;
  }
  bool previous_;
};

// A forward that runs again only to rebuild what backward needs (--recompute blocks,
// docs/design.md §6a): batch norm then computes its batch statistics as before but leaves its
// running statistics alone, so they are updated once per step.
using RecomputeScope = ForwardScope<struct RecomputeTag>;
// Forwards that no backward follows (evaluation): layers keep nothing for a backward, so an
// evaluation holds one layer's input and output at a time.
using NoBackwardScope = ForwardScope<struct NoBackwardTag>;

// The bytes an activation (or its gradient) of shape `s` holds: every activation is f32
// (kernels/math_mode.h), so 4 per element, rounded up to the size class of the allocator
// being described (core/size_class.h; the host's unless a SizeClassScope says otherwise).
// What layers state to the memory model, one call per tensor, so that the model counts what
// the allocator counts.
int64_t activation_bytes(const Shape& s);
// The bytes of a tensor of `bytes` bytes in the allocator being described.
int64_t stored_bytes(int64_t bytes);
// The rounded copies of operands of `shapes` that the host's kernels make under math mode
// `m` (tf32 and bf16 round each operand of a convolution or GEMM into a scratch copy, then
// run in fp32: kernels/gemm.h); 0 in fp32 or on a GPU.
int64_t rounded_copies_bytes(ops::MathMode m, const Device& device, std::initializer_list<Shape> shapes);
// Describes the memory of `device`'s allocator on this thread for the scope's lifetime.
class SizeClassScope {
 public:
  explicit SizeClassScope(const Device& device);
  ~SizeClassScope();
  SizeClassScope(const SizeClassScope&) = delete;
  SizeClassScope& operator=(const SizeClassScope&) = delete;

 private:
  SizeClasses previous_;
};

// Throws gridnn::Error "<layer>: <what>" unless `cond`: the shape and argument checks of
// every layer use it, so messages name the layer.
void require_layer(bool cond, const std::string& layer, const std::string& what);

}  // namespace gridnn::nn
