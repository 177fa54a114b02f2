// The training loop, readable top to bottom (docs/design.md §10): build the model, data and
// optimizer from TrainOptions, resume or load weights if asked, then
//
//   for each step: next batch -> forward -> loss -> zero_grad -> backward -> optimizer step
//                  -> progress, metrics line
//                  -> a stop signal on any rank? (one tiny all-reduce) save and stop
//                  -> validation and checkpoint when due
//
// Stop signals (core/stop_signal.h: SIGTERM, SIGINT, SIGUSR1, on one rank or on all) end
// the run at the next step boundary on every rank together; with on_signal "save-exit" it
// first writes a checkpoint, from which --resume continues bitwise (gridnn-train then exits
// with requeue_exit_code, so a batch script can resubmit the job).
//
// Deterministic given the seed: the data order, augmentation and initialization are keyed
// by it, the kernels reduce in a fixed order, and a run resumed from a checkpoint continues
// with exactly the values of the uninterrupted run (bitwise on the CPU).
#pragma once

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/readback.h"
#include "core/transfers.h"
#include "models/data/loader.h"
#include "models/data/nifti_dataset.h"
#include "models/layers/loss.h"
#include "models/run/grid_batch.h"
#include "models/run/metrics.h"
#include "models/run/pipelined_model.h"
#include "models/train/checkpoint.h"
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
  run::Metrics run(int64_t stop_at_step = -1);
  // One optimizer step on this rank's shard of a batch (CPU tensors; moved to the device);
  // returns the loss over the global batch, f32 [1] on the device, not read back (run()
  // reads it once per options.log_every steps).
  Tensor train_step(const data::Batch& shard);
  // The validation set in evaluation mode.
  run::Metrics evaluate();

  nn::Module& model();
  optim::Optimizer& optimizer();
  // The model's tensors as the single-process run holds them (collective over the grid:
  // pipeline stages and 1.5D row blocks gathered).
  NamedTensors whole_model_tensors();
  run::PipelinedModel& pipelined_model() { return *model_; }
  const RunState& state() const { return state_; }
  int64_t total_steps() const { return total_steps_; }
  // Saves a checkpoint now (options.checkpoint_dir must be set); returns its path, or ""
  // when the save failed and options.save_errors is "warn" (a warning said why). With
  // "stop", a failed save throws, naming the folder and the cause; the checkpoints saved
  // before are untouched either way.
  std::string save();

  // How run() ended early for a stop signal: the signal (0: it did not), and the checkpoint
  // written then ("" when none was).
  struct Stop {
    int signal = 0;
    std::string checkpoint;
  };
  const Stop& stopped() const { return stop_; }

 private:
  void restore(const Checkpoint& checkpoint);
  void log_json(const std::string& line);
  void say(const std::string& line);  // a line on `out` (first rank)
  // Collective over the world: the stop signal any rank received (0: none), and the highest
  // rank that received one.
  std::pair<int, int> agree_on_stop();
  // The losses of the steps since the last read stay on the device side by side
  // (docs/design.md §2: a step reads nothing back). keep_loss after each step; read_losses
  // reports the interval whose copy was started before (progress, metrics file; gridnn::Error
  // naming the first step whose loss is not finite) and starts copying the current one
  // (core/readback.h), or with `wait` reports it too.
  void keep_loss(const Tensor& loss, double lr, double seconds);
  // The predicted and measured peak of every rank (collective over the world): a "memory"
  // line per rank in the metrics file after the first step and at the end, and the
  // --memory-report table at the end.
  void report_memory(bool at_end);
  void read_losses(Progress& progress, bool wait);
  void report_losses(Progress& progress);

  TrainOptions options_;
  std::unique_ptr<parallel::ProcessGrid> own_grid_;  // when none was given
  parallel::ProcessGrid* grid_;
  bool leader_;            // world rank 0: reports and writes files
  std::FILE* out_;         // null on the other ranks
  run::BatchShard shard_;  // this rank's rows and depth planes
  std::unique_ptr<run::PipelinedModel> model_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  Datasets data_;
  std::unique_ptr<data::BatchLoader> loader_;
  RunState state_;
  int64_t total_steps_ = 0;
  std::ofstream metrics_;
  Stop stop_;
  struct UnreadLoss {
    int64_t step, epoch;
    double lr, seconds;
  };
  std::vector<UnreadLoss> unread_;     // the steps whose losses are in unread_losses_[0, n)
  Tensor unread_losses_;               // f32 [log_every] on the step's device
  std::vector<UnreadLoss> in_flight_;  // the steps whose losses readback_ is copying
  Readback readback_;
  TransferCounts step_transfers_;      // host<->device copies inside train_step this run
  plan::MemoryPeak predicted_memory_;  // this rank's, by the memory model
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
