// A model, its optimizer and its gradient synchronization on one rank of a process grid:
// the part of a training step that the Trainer and single-step mode (dump_step) share.
//
//   forward_backward(shard)  forward on this rank's rows and depth planes, the loss over the
//                            global batch, zero_grad, backward (dlogits divided by the global
//                            batch), then every gradient summed over the ranks that share it
//                            (by default overlapping backward: GradientSync)
//   update(lr)               the optimizer step, the same on every rank
//
// With pipeline stages (a grid Ps x Pr x Pc with Ps > 1) or micro-batches, the step runs the
// GPipe schedule of models/train/pipeline.h: this rank runs its partition's blocks, and its
// optimizer and gradient synchronization own that partition's parameters only.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "models/data/loader.h"
#include "models/layers/loss.h"
#include "models/nets/layer_factory.h"
#include "models/optim/optimizer.h"
#include "models/train/gradient_sync.h"
#include "models/train/options.h"
#include "models/train/pipeline.h"
#include "parallel/process_grid.h"

namespace gridnn::train {

// The layers for `grid`: the single-process ones on a 1x1 grid, else models/dist/'s.
std::unique_ptr<nn::LayerFactory> layers_for(parallel::ProcessGrid& grid);

class ModelOnGrid {
 public:
  // Builds the model (initialized from options.seed, or from options.init_from), moves it to
  // the device, sets the precision, and makes the optimizer.
  ModelOnGrid(const TrainOptions& options, parallel::ProcessGrid& grid);

  // Returns the mean loss over the global batch (`global_rows` samples); `logits` gets this
  // rank's rows.
  double forward_backward(const data::Batch& shard, int64_t global_rows, Tensor* logits);
  void update(double lr) { optimizer_->step(lr); }
  // Gradient synchronization: overlapping backward (the default) or after it (reduce()),
  // in buckets of `bucket_bytes`. The results are bitwise the same.
  void set_gradient_sync(bool overlap, int64_t bucket_bytes = GradientSync::kDefaultBucketBytes);
  // Of the last forward_backward: seconds in backward (with the overlapped synchronization's
  // work inside it) and in the synchronization after it (the exposed part).
  struct StepTiming {
    double backward_seconds = 0, sync_seconds = 0;
  };
  const StepTiming& last_timing() const { return timing_; }
  const GradientSync& gradient_sync() const { return *sync_; }
  // Evaluation-mode forward; returns the summed loss of this rank's rows (none: 0, and
  // empty logits).
  double evaluate(const data::Batch& shard, Tensor* logits);

  // The model's tensors, gradients and optimizer state as the single-process run holds them
  // (collective over the world): a pipeline's stages exchange theirs, and row blocks of
  // 1.5D layers are gathered (WholeState). What checkpoints and --dump-step write.
  NamedTensors whole_model_tensors();
  NamedTensors whole_gradients();
  NamedTensors whole_optimizer_state();
  // Of a checkpoint's (whole) optimizer state, what this rank's optimizer holds: its
  // partition's parameters, cut to its row blocks.
  std::map<std::string, Tensor> own_optimizer_state(const std::map<std::string, Tensor>& whole) const;
  Pipeline* pipeline() { return pipeline_.get(); }

  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const Device& device() const { return device_; }

 private:
  parallel::ProcessGrid& grid_;
  Device device_;
  int64_t classes_;
  std::unique_ptr<nn::LayerFactory> layers_;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<Pipeline> pipeline_;  // with stages or micro-batches
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<GradientSync> sync_;
  bool overlap_ = true;
  StepTiming timing_;
  nn::SoftmaxCrossEntropy loss_;
};

}  // namespace gridnn::train
