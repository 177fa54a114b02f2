// Pipeline stages (DESIGN §7): the network's coarse blocks (models/nets/blocks.h) cut into K
// contiguous partitions by a placement (plan/placement.h); partition k runs on the ranks
// of stage group device[k] of the grid Ps x Pr x Pc (Ps = K), each stage on its own Pr x Pc
// grid exactly as an unpipelined run (domain and batch parallelism inside the stage).
//
// One training step, GPipe's schedule with M micro-batches (micro-batch m: the global batch
// rows i with i % M == m, so each batch shard holds its part of every micro-batch and a
// micro-batch is the same set of samples on every grid):
//   forward   m = 0..M-1: receive the activation from the previous partition (the first
//             one takes the input rows), run the partition's blocks, send the output on; the
//             last partition computes the loss of micro-batch m over the global batch.
//   backward  m = M-1..0: receive the output gradient (the last partition: dL/dlogits),
//             run the blocks' backward, send dL/dinput back. The layers keep only one
//             forward's state, so every micro-batch but the last is recomputed from its
//             stashed input first (GPipe's re-materialization; batch-norm buffers are put
//             back afterwards, so running statistics see each micro-batch once).
//   then the partition's gradients are summed over its stage grid (GradientSync), and the
//   partition's optimizer updates its own parameters.
// Activations and gradients cross stages on the pipe communicator (ranks (s, r, c) of every
// stage s for one (r, c)), one header message (the shape) and one data message each.
//
// Semantics: with M = 1 a step computes exactly what the unpipelined network computes (the
// same kernels in the same order), so any Ps equals the 1 x 1 run. With M > 1 parameter
// gradients are sums over micro-batches (equal up to floating-point reassociation), except
// for batch norm: each micro-batch is normalized with its own statistics (synchronized over
// the stage's grid) and updates the running statistics once, as in GPipe and in PyTorch with
// micro-batches; a network with batch norm then differs from the full-batch run by design,
// but not from grid to grid (the micro-batches are interleaved over the global batch).
//
// Every stage builds the whole network (same initialization), but only its partition's
// blocks run and only their parameters are optimized; share_model() and
// full_optimizer_state() bring every partition's tensors to every stage before a checkpoint,
// which therefore holds the whole model and resumes on any grid or placement.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/data/loader.h"
#include "models/layers/loss.h"
#include "models/module.h"
#include "models/nets/blocks.h"
#include "models/optim/optimizer.h"
#include "models/train/options.h"
#include "plan/placement.h"
#include "parallel/process_grid.h"

namespace gridnn::train {

class Pipeline {
 public:
  // `model` must be a BlockNetwork (ResAttNet3D, Mlp). The placement needs one partition per
  // stage of `grid` on distinct stage groups; micro_batches >= 1. Throws gridnn::Error
  // saying what to change.
  Pipeline(nn::Module& model, parallel::ProcessGrid& grid, plan::Placement placement, int micro_batches);

  const plan::Placement& placement() const { return placement_; }
  int partition() const { return partition_; }  // this rank's
  bool first() const { return partition_ == 0; }
  bool last() const { return partition_ + 1 == placement_.partitions(); }
  int micro_batches() const { return micro_batches_; }
  // This partition's parameters (state_dict names): what its optimizer and gradient sync own.
  optim::ParameterList parameters() const;

  // One GPipe forward and backward of this rank's batch shard (see above); parameter
  // gradients are zeroed first and left unsummed over the stage grid. Returns the mean loss
  // over the global batch (`global_rows` samples) on every rank; `logits` gets this rank's
  // rows on every stage.
  double forward_backward(const data::Batch& shard, int64_t global_rows, nn::SoftmaxCrossEntropy& loss,
                          Tensor* logits);
  // Evaluation-mode forward of the whole shard (one micro-batch); returns the summed loss of
  // this rank's rows, and `logits` gets them, on every stage.
  double evaluate(const data::Batch& shard, nn::SoftmaxCrossEntropy& loss, Tensor* logits);

  // Every stage receives every partition's parameters and buffers (for a checkpoint), or
  // their gradients (for --dump-step).
  void share_model();
  void share_gradients();
  // Every partition's optimizer state, under the optimizer's names, on every stage. Each
  // partition's optimizer must be of the same kind and have taken the same steps.
  NamedTensors full_optimizer_state(const optim::Optimizer& optimizer);

  // A text such as "stage 0: stem .. layer2.1 (6 blocks) on stage group 0; ..."
  std::string describe() const;

 private:
  int group_of(int partition) const { return placement_.device[size_t(partition)]; }
  int partition_of_block(size_t block) const;
  Tensor run_forward(const Tensor& x);   // this partition's blocks
  Tensor run_backward(const Tensor& dy);
  void send(const Tensor& t, int to_partition, int tag);
  Tensor receive(int from_partition, int tag);
  // Sends logits and the loss from the last partition to every stage.
  void share_outputs(Tensor* logits, double* loss);

  nn::Module& model_;
  nn::BlockNetwork& net_;
  parallel::ProcessGrid& grid_;
  plan::Placement placement_;
  int micro_batches_;
  int partition_ = 0;
  size_t begin_ = 0, end_ = 0;  // this partition's blocks
  Device device_;
};

// Blocks dealt to `stages` partitions in equal counts (the first ones one more), partition k
// on stage group k.
plan::Placement even_placement(const nn::BlockNetwork& net, int stages);
// The block profile of the options' network on this process (the single-process layers):
// each block's forward and backward seconds (median of `repeats`) on `rows` samples, the
// bytes of its output, of its parameters with their gradients and optimizer state, and of
// the activations it keeps for backward (estimated as its input and output).
plan::Profile profile_blocks(const TrainOptions& options, int64_t rows, int repeats = 3);
// The placement options.placement asks for, for the grid's Ps stages: "" or "even", a
// placement file (plan/placement.h, docs/placement.md), or "auto": world rank 0 profiles
// the blocks at this run's micro-batch size and GABRA places them on Ps identical devices
// (links: 2 µs, 10 GB/s); the result is shared with every rank. Collective over the world.
plan::Placement choose_placement(const TrainOptions& options, const nn::BlockNetwork& net,
                                  parallel::ProcessGrid& grid);

}  // namespace gridnn::train
