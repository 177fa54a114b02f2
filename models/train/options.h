// Everything a training run is configured by: what gridnn-train's flags fill in, what a
// checkpoint records (as JSON) and what a resumed run checks against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "models/nets/mlp.h"
#include "models/nets/resattnet3d.h"
#include "models/optim/optimizer.h"
#include "models/optim/schedule.h"

namespace gridnn::train {

struct DataOptions {
  std::string source = "synthetic";  // "synthetic" or a CSV manifest of NIfTI volumes
  int64_t train_samples = 256;       // synthetic only
  int64_t val_samples = 128;         // synthetic only
  double val_fraction = 0.2;         // manifest rows without a split column
  bool augment = true;               // random shifts / flips and fresh noise while training
  bool cache = false;                // keep loaded training samples in memory (needs augment off)
  std::string fit = "crop";          // NIfTI: crop (center crop or zero pad) | resample
  std::string orientation = "canonical";  // NIfTI: canonical (closest RAS+) | native (stored voxel order)
  double spacing = 0;                // NIfTI: resample to voxels of this many mm before the fit; 0: off
};

struct TrainOptions {
  std::string model = "resattnet3d";  // resattnet3d | mlp
  nn::ResAttNetConfig resattnet;      // depth, width, attention switches (classes, channels below)
  std::vector<int64_t> mlp_hidden{256, 64};
  int64_t in_channels = 1;
  int64_t classes = 2;
  std::vector<int64_t> input{32, 32, 32};  // D, H, W

  int64_t batch = 8;
  int64_t epochs = 0;  // one of epochs / steps; steps wins when both are set
  int64_t steps = 0;
  optim::OptimizerOptions optimizer;
  optim::ScheduleOptions schedule;  // schedule.base_lr is the learning rate
  DataOptions data;

  std::string grid = "1x1";    // PrxPc or PsxPrxPc (docs/design.md §4); the job must have Ps*Pr*Pc processes
  // Pipeline stages (docs/design.md §7, models/train/pipelined_model.h): Ps (also given by a PsxPrxPc
  // grid), GPipe micro-batches per step, and where the stages cut the network: "" or
  // "even", "auto" (GABRA on measured blocks) or a placement file (docs/placement.md).
  int stages = 1;
  int micro_batches = 1;
  std::string placement;
  bool comm_report = false;   // print the per-layer communication table at the end
  std::string device = "cpu";
  std::string comm_backend = "auto";  // auto | mpi | nccl (parallel/process_grid.h)
  std::string precision = "fp32";  // fp32 | tf32 | bf16
  uint64_t seed = 1;

  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t save_every = 0;      // steps; 0: at the end only
  int keep_checkpoints = 2;
  bool resume = false;
  std::string init_from;       // weights (safetensors, PyTorch names)
  std::string metrics_path;    // JSON lines
  int64_t eval_every = 0;      // steps; 0: at the end of every epoch
  bool progress = true;        // a progress bar on a terminal
  int64_t log_every = 10;      // steps between reads of the training loss (and its reports)

  // Running on a cluster (docs/cluster.md). They change where and how long ranks run, never
  // the results, so checkpoints do not record them.
  std::string rank_order = "rows-in-node";  // rows-in-node | cols-in-node (parallel/process_grid.h)
  double comm_timeout = 300;                // s one communication may wait; 0: forever
  std::string on_signal = "save-exit";      // SIGTERM/SIGINT/SIGUSR1: save-exit | exit
  int requeue_exit_code = 75;               // the exit status after a signal's checkpoint
  std::string save_errors = "stop";         // a failed checkpoint save: stop | warn (train on)
};

// The options as JSON (for checkpoints and the metrics file) and back.
std::string to_json(const TrainOptions& options);
TrainOptions options_from_json(const std::string& json);
// Checks what the options alone can tell (gridnn::Error saying which flag to change).
void validate(const TrainOptions& options);

// The network the options describe, with the layers of `layers` (a grid's, for domain and
// batch parallelism), its modules named (state_dict names), and initialized from
// options.seed unless `initialize` is false (a network built only to describe itself).
std::unique_ptr<nn::Module> build_model(const TrainOptions& options,
                                        const nn::LayerFactory& layers = nn::LayerFactory(), bool initialize = true);

}  // namespace gridnn::train
