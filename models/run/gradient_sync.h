// Gradient synchronization on a process grid (docs/design.md §4): after backward, every
// parameter's gradient is summed over the ranks its layer declared (ParameterLayout::
// grad_sum_over: the whole stage for weights replicated there and computed from depth slabs,
// the col communicator for layers replicated on the row and for row blocks), so that every
// rank's optimizer then takes the same step. Parameters without one (one process) and groups
// of one rank are left alone.
//
// Gradients live in buckets of about `bucket_bytes`: each bucket is one flat tensor and each
// of its parameters' `grad` a view of its part (bound when the buckets are made, as Megatron
// maps main_grad into its buffer), so backward accumulates straight into the bucket and one
// all-reduce per bucket sums it in place: no packing or unpacking. Each gradient starts
// kGradientAlignmentBytes into its device's arena (the padding between them is zeros, summed
// with them), so that cuDNN's filter gradients and vector loads never see a 4-byte offset
// left by a 1-float parameter before them. A gradient replaced since
// (Module::to) is copied in and bound again before its bucket's all-reduce. Counted in the
// comm log under the layer "gradients".
// Buckets first follow reverse registration order (about the order backward finishes the
// parameters); after the first overlapped step they are rebuilt in the order backward
// really finished them (as PyTorch DDP does), so that a bucket is not held back by a
// parameter that finishes late — a residual block's downsample, registered last but run
// after the main branch. The order comes from the module structure, so it is the same on
// every rank; with the MPI backend (each element summed in rank order) the sums are
// bitwise the same whatever the buckets, with NCCL they may differ in rounding.
//
// Two ways to run it:
//   reduce()   after the whole backward: every bucket all-reduced in turn (blocking).
//   overlap    begin(); backward under a BackwardObserverScope of this object; finish().
//              Each module that finishes its backward (Module::backward) marks its
//              parameters, and its descendants', ready; a bucket whose parameters are all
//              ready has its all-reduce started (non-blocking, in the order the
//              buckets become ready, which is the same on every rank); each later
//              notification advances the started ones, so they proceed while backward goes
//              on where the communicator moves data by itself (NCCL, MPI between nodes; on
//              one node MPI runs them through shared memory when waited for, in finish:
//              parallel/mpi_communicator.h). finish() starts what is left and waits for all.
//              The result is bitwise that of reduce().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/layers/module.h"
#include "parallel/communicator.h"

namespace gridnn::run {

// Where gradients start in their arena, in bytes (cuDNN's and the CUDA allocator's alignment).
inline constexpr int64_t kGradientAlignmentBytes = 256;
// The f32 elements a gradient of `elements` takes in its bucket: rounded up to the alignment.
// The all-reduces carry them all (run::step_plan counts them, run::memory_plan holds them).
constexpr int64_t gradient_slot_elements(int64_t elements) {
  constexpr int64_t align = kGradientAlignmentBytes / int64_t(sizeof(float));
  return (elements + align - 1) / align * align;
}

class GradientSync : public nn::BackwardObserver {
 public:
  static constexpr int64_t kDefaultBucketBytes = int64_t(4) << 20;

  // For `params` of `model` (by default all of them), able to overlap with its backward. Made
  // before any backward: the gradients it binds start at zero.
  GradientSync(nn::Module& model, std::vector<std::pair<std::string, nn::Parameter*>> params,
               int64_t bucket_bytes = kDefaultBucketBytes);
  explicit GradientSync(nn::Module& model, int64_t bucket_bytes = kDefaultBucketBytes);
  ~GradientSync() override;

  // Sums every gradient over its communicator (nothing on one process), after backward.
  void reduce();

  // Right after the gradients are zeroed for a step: after the first overlapped step, the
  // buckets are rebuilt here in backward's order, the one moment that needs no copy.
  void on_zero_grad();

  // Overlapped (see above): before backward; notifications (as an observer); after it.
  void begin();
  void on_backward_done(nn::Module& module) override;
  void finish();

  int64_t buckets() const { return int64_t(buckets_.size()); }
  // Bucket i's flat tensor and its parameters, whose gradients are views of it in this order.
  const Tensor& bucket_gradients(int64_t i) const { return buckets_.at(size_t(i)).flat; }
  const std::vector<nn::Parameter*>& bucket_parameters(int64_t i) const { return buckets_.at(size_t(i)).params; }
  // Of the last overlapped step: the buckets' indices in the order their all-reduces
  // started (0, 1, 2, ... once the buckets follow backward's order).
  const std::vector<int64_t>& start_order() const { return start_order_; }
  // Of the last overlapped step: the buckets started during backward (before finish()),
  // and the seconds spent in begin/notifications (starting, advancing) and in
  // finish (the exposed wait after backward).
  int64_t buckets_started_in_backward() const { return started_in_backward_; }
  double seconds_in_backward() const { return seconds_in_backward_; }
  double seconds_in_finish() const { return seconds_in_finish_; }

 private:
  struct Bucket {
    parallel::Communicator* comm;
    std::vector<nn::Parameter*> params;
    int64_t elements = 0;  // the parameters' slots (gradient_slot_elements)
    int64_t offset = 0;    // where flat starts in its device's arena
    Tensor flat;           // the parameters' gradients, one slot after another (bind)
    int64_t waiting = 0;   // overlap: parameters not ready yet
    std::unique_ptr<parallel::PendingCall> pending;
  };
  using CommOf = std::pair<nn::Parameter*, parallel::Communicator*>;
  // Buckets of at most bucket_bytes_, contiguous in the given order, one communicator and
  // one device each; then the slots that overlap needs (when a model is known).
  void assign(const std::vector<CommOf>& ordered);
  void index_slots();
  // After the first overlapped step, with the gradients zero: the buckets again, in the order
  // the parameters became ready (ready_order_), those never notified last in their old order.
  void rebuild_in_ready_order();
  // Makes each parameter's grad a view of its part of b.flat, copying in any gradient that is
  // not one yet. b.flat is a view of the arena of the parameters' device (made on first use):
  // every bucket's gradients, one after another, one allocation whatever the buckets (as
  // Megatron's gradient buffer), which the memory model counts as one tensor.
  void bind(Bucket& b);
  void start(Bucket& b);
  void advance();

  int64_t bucket_bytes_;
  nn::Module* model_;  // whose modules tell when their parameters are final
  std::vector<Bucket> buckets_;
  std::map<std::string, Tensor> arenas_;  // by device (Device::str)
  // Overlap: for each module, the (bucket, parameter) slots of it and its descendants; the
  // bucket of each parameter slot, and whether it is ready this step.
  std::unordered_map<nn::Module*, std::vector<int64_t>> module_slots_;
  std::vector<int64_t> slot_bucket_;
  std::vector<nn::Parameter*> slot_param_;
  std::vector<char> slot_ready_;
  bool overlapping_ = false;
  bool rebuilt_ = false;
  std::vector<nn::Parameter*> ready_order_;  // first overlapped step
  std::vector<int64_t> start_order_;
  int64_t started_in_backward_ = 0;
  double seconds_in_backward_ = 0, seconds_in_finish_ = 0;
};

}  // namespace gridnn::run
