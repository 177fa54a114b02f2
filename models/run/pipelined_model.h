// PipelinedModel: a model as one rank of a process grid runs it, with what it owns for that:
// the network, its pipeline placement and this rank's partition of it, the partition's
// optimizer and gradient synchronization, and the schedule of a training step over the stages.
// The Trainer, single-step mode (--dump-step) and gridnn-predict share it. One path for every
// run: the plain step is the pipeline with one stage and one micro-batch.
//
// The network's coarse blocks (models/nets/blocks.h) are cut into Ps contiguous partitions
// by a placement (plan/placement.h; one partition with one stage); partition k runs on the
// ranks of stage group device[k] of the grid Ps x Pr x Pc, each stage on its own Pr x Pc
// grid (domain and batch parallelism inside the stage, docs/design.md §4). A step is GPipe's
// schedule with M micro-batches (micro-batch m: the global batch rows i with i % M == m, so
// each batch shard holds its part of every micro-batch and a micro-batch is the same set of
// samples on every grid; docs/design.md §7):
//   forward   m = 0..M-1: receive the activation from the previous partition (the first one
//             takes the input rows), run the partition's blocks, send the output on; the
//             last partition computes the loss of micro-batch m over the global batch.
//   backward  m = M-1..0: receive the output gradient (the last partition: dL/dlogits), run
//             the blocks' backward, send dL/dinput back. The layers keep only one forward's
//             state, so every micro-batch but the last is recomputed from its stashed input
//             first (GPipe's re-materialization; batch-norm buffers are put back afterwards,
//             so running statistics see each micro-batch once).
//   then the partition's gradients are summed over the ranks each layer declared
//   (GradientSync; with one stage its buckets start during the last backward, overlapping
//   it), and the partition's optimizer updates its own parameters (update()).
// Activations and gradients cross stages on the pipe communicator, a header message (the
// shape) and a data message each; the loss and logits go from the last stage to all.
//
// Semantics: with M = 1 any grid and any Ps compute what the single process computes (the
// same kernels in the same order; sums reassociated over ranks). With M > 1 parameter
// gradients are sums over micro-batches, and batch norm normalizes each micro-batch with its
// own statistics (synchronized over the stage's grid) and updates the running statistics
// once per micro-batch, as GPipe and PyTorch with micro-batches do: the same on every grid.
//
// Every stage builds the whole network (same initialization), but only its partition's
// blocks run and only their parameters are optimized. state_dict() brings every partition's
// tensors, whole, to every rank, so a checkpoint holds the whole model and resumes on any
// grid, stage count or placement.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/profile.h"
#include "core/safetensors.h"
#include "models/data/loader.h"
#include "models/layers/loss.h"
#include "models/nets/blocks.h"
#include "models/optim/optimizer.h"
#include "models/run/gradient_sync.h"
#include "models/run/run_options.h"
#include "parallel/process_grid.h"
#include "plan/placement.h"

namespace gridnn::run {

// The layers for `grid`: the single-process ones on a 1x1 grid (of each stage), else
// models/dist/'s, switching to the batch split at block o.batch_split_from (none if empty),
// their halos exchanged as o.halo says.
std::unique_ptr<nn::LayerFactory> layers_for(parallel::ProcessGrid& grid, const RunOptions& o);
// Whether every micro-batch of every batch shard of `grid` splits evenly over its row, as the
// switch to the batch split needs (SplitBatch); true without a switch or with one row.
bool batch_split_fits(const RunOptions& options, const parallel::GridShape& grid);
// Checks options.batch_split_from against the network's blocks and batch_split_fits
// (gridnn::Error saying what to change).
void check_batch_split(const RunOptions& options, const nn::BlockNetwork& net, const parallel::GridShape& grid);

// A model's training state as one process holds it: parameters and buffers (state_dict
// names), the optimizer's state ("<param>.<what>") and its step count.
struct TrainingState {
  NamedTensors model;
  NamedTensors optimizer;
  int64_t optimizer_steps = 0;
};

class PipelinedModel {
 public:
  // Builds the model (initialized from options.seed, or loaded from options.init_from), moves
  // it to the device, sets the precision, places the stages (options.placement) and makes the
  // optimizer and the gradient synchronization of this rank's partition. gridnn::Error saying
  // what to change for options the grid cannot run.
  PipelinedModel(const RunOptions& options, parallel::ProcessGrid& grid);
  ~PipelinedModel();

  // One forward and backward of this rank's batch shard (see above); parameter gradients
  // are zeroed first and summed over their ranks at the end. Returns the mean loss over the
  // global batch (`global_rows` samples) on every rank: f32 [1] on the model's device, not read
  // back (docs/design.md §2); `logits` gets this rank's rows on every stage. Labels out of
  // range are a gridnn::Error before anything runs.
  Tensor forward_backward(const data::Batch& shard, int64_t global_rows, Tensor* logits);
  // The optimizer step of this rank's partition, the same on every rank of a stage.
  void update(double lr) {
    const ProfileScope profile(ProfileKind::optimizer);
    optimizer_->step(lr);
  }
  // Evaluation-mode forward of the shard (one micro-batch); returns the summed loss of this
  // rank's rows (none: 0, and empty logits), and `logits` gets them, on every stage.
  double evaluate(const data::Batch& shard, Tensor* logits);

  // Gradient synchronization overlapping the backward (the default with one stage) or after
  // it, in buckets of `bucket_bytes`. The results are bitwise the same.
  void set_gradient_sync(bool overlap, int64_t bucket_bytes = GradientSync::kDefaultBucketBytes);
  const GradientSync& gradient_sync() const { return *sync_; }
  // Of the last forward_backward: seconds in backward (with the overlapped synchronization's
  // work inside it; with stages the whole schedule) and in the synchronization after it.
  struct Timing {
    double backward_seconds = 0, sync_seconds = 0;
  };
  const Timing& last_timing() const { return timing_; }

  // The state as one process holds it, on every rank (collective over the world: the stages
  // exchange their partitions, row blocks are gathered): what a checkpoint writes.
  TrainingState state_dict();
  // Its parts: the model's tensors, and the optimizer's state (each collective alike).
  NamedTensors model_state();
  NamedTensors optimizer_state();
  // The opposite (no communication): this rank's parts of a whole state. Strict: every
  // model tensor present with its whole shape, nothing unexpected (gridnn::Error naming
  // `source` and listing what differs); the optimizer state as load_state checks it.
  void load_state_dict(const TrainingState& state, const std::string& source);
  // Every parameter's gradient, whole, on every rank (collective): what --dump-step writes.
  NamedTensors gradients();

  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const Device& device() const { return device_; }
  int stages() const { return placement_.partitions(); }
  int micro_batches() const { return micro_batches_; }
  const plan::Placement& placement() const { return placement_; }
  // "stage 0: stem .. layer2.1 (6 blocks) on stage group 0; ..."
  std::string describe_stages() const;
  // This rank's step for the memory model (models/run/memory_plan.h) with `options`' batch,
  // micro-batches and optimizer (those of the run, or others to try), and a checkpoint its
  // setup restores (`restored`, empty: none).
  plan::MemoryStep memory_step(const RunOptions& options, const std::string& restored = {});

 private:
  bool first() const { return partition_ == 0; }
  bool last() const { return partition_ + 1 == placement_.partitions(); }
  int group_of(int partition) const { return placement_.device[size_t(partition)]; }
  int partition_of_block(size_t block) const;
  bool mine(const std::string& tensor_name) const;  // in this rank's partition
  optim::ParameterList partition_parameters();
  void send(const Tensor& t, int to_partition, int tag);
  Tensor receive(int from_partition, int tag);
  // Sends logits and the loss from the last partition to every stage.
  void share_outputs(Tensor* logits, Tensor* loss);

  parallel::ProcessGrid& grid_;
  Device device_;
  int64_t classes_;
  std::unique_ptr<nn::LayerFactory> layers_;
  std::unique_ptr<nn::Module> model_;
  nn::BlockNetwork* net_;
  plan::Placement placement_;
  int micro_batches_;
  // The row's size past a switch to the batch split (options.batch_split_from), else 1:
  // evaluate() pads a shard to a multiple of it.
  int split_rows_ = 1;
  int partition_ = 0;
  size_t begin_ = 0, end_ = 0;  // this partition's blocks
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<GradientSync> sync_;
  bool overlap_ = true;
  Timing timing_;
  nn::SoftmaxCrossEntropy loss_;
};

// Where the stages cut the network (stage_placement.cpp): blocks dealt to `stages`
// partitions in equal counts (the first ones one more), partition k on stage group k.
plan::Placement even_placement(const nn::BlockNetwork& net, int stages);
// The block profile of the options' network on this process (the single-process layers,
// timed by models/run/timing.h): each block's forward and backward seconds (median of
// `repeats`) on `rows` samples, the bytes of its output, of its parameters with their
// gradients and optimizer state, and of the activations it keeps for backward (estimated as
// its input and output).
plan::Profile profile_blocks(const RunOptions& options, int64_t rows, int repeats = 3);
// The placement options.placement asks for, for the grid's Ps stages: "" or "even", a
// placement file (plan/placement.h, docs/placement.md), or "auto": world rank 0 profiles the
// blocks at this run's micro-batch size and GABRA places them on Ps identical devices (links:
// 2 µs, 10 GB/s); the result is shared with every rank. Collective over the world.
plan::Placement choose_placement(const RunOptions& options, const nn::BlockNetwork& net, parallel::ProcessGrid& grid);

}  // namespace gridnn::run
