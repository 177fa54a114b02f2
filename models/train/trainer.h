// The training loop, readable top to bottom (docs/design.md §10): build the model, data and
// optimizer from TrainOptions, resume or load weights if asked, then
//
//   for each step: next batch -> forward -> loss -> zero_grad -> backward -> optimizer step
//                  -> progress, metrics line, validation and checkpoint when due
//
// Deterministic given the seed: the data order, augmentation and initialization are keyed
// by it, the kernels reduce in a fixed order, and a run resumed from a checkpoint continues
// with exactly the values of the uninterrupted run (bitwise on the CPU).
#pragma once

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "models/data/loader.h"
#include "models/layers/loss.h"
#include "models/train/checkpoint.h"
#include "models/train/grid_batch.h"
#include "models/train/metrics.h"
#include "models/train/step.h"
#include "models/train/options.h"
#include "models/train/progress.h"

namespace gridnn::train {

// The datasets the options name: synthetic train/validation sets, or the rows of a NIfTI
// manifest split into train and validation.
struct Datasets {
  std::unique_ptr<data::Dataset> train, val;
};
Datasets make_datasets(const TrainOptions& options);

class Trainer {
 public:
  // Builds everything; with options.resume, restores the newest checkpoint in
  // options.checkpoint_dir (a fresh start when there is none); with options.init_from,
  // loads weights. `out` receives progress and results (on the first rank only). `grid`:
  // the process grid to train on (must outlive the trainer); null for one process.
  explicit Trainer(TrainOptions options, std::FILE* out = stdout, parallel::ProcessGrid* grid = nullptr);
  ~Trainer();

  // Trains to the end (options.steps, or options.epochs) or, when stop_at_step >= 0, until
  // that many steps are done (a time-limited job; with checkpoints it saves there, and a
  // --resume run continues as if it had not stopped). Returns the last validation.
  Metrics run(int64_t stop_at_step = -1);
  // One optimizer step on this rank's shard of a batch (CPU tensors; moved to the device);
  // returns the loss over the global batch.
  double train_step(const data::Batch& shard);
  // The validation set in evaluation mode.
  Metrics evaluate();

  nn::Module& model();
  optim::Optimizer& optimizer();
  // The model's tensors as the single-process run holds them (collective over the grid:
  // pipeline stages and 1.5D row blocks gathered).
  NamedTensors whole_model_tensors();
  Step& step() { return *step_; }
  const RunState& state() const { return state_; }
  int64_t total_steps() const { return total_steps_; }
  // Saves a checkpoint now (options.checkpoint_dir must be set); returns its path.
  std::string save();

 private:
  void restore(const Checkpoint& checkpoint);
  void log_json(const std::string& line);
  void say(const std::string& line);  // a line on `out` (first rank)

  TrainOptions options_;
  std::unique_ptr<parallel::ProcessGrid> own_grid_;  // when none was given
  parallel::ProcessGrid* grid_;
  bool leader_;                                  // world rank 0: reports and writes files
  std::FILE* out_;                               // null on the other ranks
  BatchShard shard_;                             // this rank's rows and depth planes
  std::unique_ptr<Step> step_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  Datasets data_;
  std::unique_ptr<data::BatchLoader> loader_;
  RunState state_;
  int64_t total_steps_ = 0;
  std::ofstream metrics_;
};

// Single-step mode (gridnn-train --batch-file B --dump-step OUT): one forward, backward and
// optimizer step on the batch in `batch_file` (tensors "x" f32 [B, C, D, H, W] and "y" i64
// [B]); writes "logits", "loss", "grad.<param>" for every parameter, and every updated
// parameter and buffer under its own name to `out_file`.
// On a grid, every rank takes its shard of the batch and the first rank writes the file the
// 1x1 run writes.
void dump_step(const TrainOptions& options, const std::string& batch_file, const std::string& out_file,
               parallel::ProcessGrid* grid = nullptr);

}  // namespace gridnn::train
