// Everything a training run is configured by: what gridnn-train's flags fill in, what a
// checkpoint records (as JSON) and what a resumed run checks against.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/names.h"
#include "kernels/math_mode.h"
#include "models/data/nifti_dataset.h"
#include "models/nets/mlp.h"
#include "models/nets/resattnet3d.h"
#include "models/optim/optimizer.h"
#include "models/optim/schedule.h"
#include "parallel/process_grid.h"

namespace gridnn::train {

enum class Model { resattnet3d, mlp };
inline constexpr EnumName<Model> kModelNames[] = {{Model::resattnet3d, "resattnet3d"}, {Model::mlp, "mlp"}};
constexpr EnumNames<Model> enum_names(Model) { return {"model", kModelNames}; }

// What a stop signal (SIGTERM, SIGINT, SIGUSR1) ends the run with (gridnn-train --on-signal).
enum class OnSignal { save_exit, exit };
inline constexpr EnumName<OnSignal> kOnSignalNames[] = {
    {OnSignal::save_exit, "save-exit", "a checkpoint, then exit with --requeue-exit-code"},
    {OnSignal::exit, "exit", "no checkpoint, exit 128+signal"}};
constexpr EnumNames<OnSignal> enum_names(OnSignal) { return {"signal action", kOnSignalNames}; }

// What a checkpoint that cannot be saved does (gridnn-train --save-errors).
enum class SaveErrors { stop, warn };
inline constexpr EnumName<SaveErrors> kSaveErrorsNames[] = {{SaveErrors::stop, "stop", "exit 1"},
                                                            {SaveErrors::warn, "warn", "a warning, then train on"}};
constexpr EnumNames<SaveErrors> enum_names(SaveErrors) { return {"save-error action", kSaveErrorsNames}; }

// The rules --placement names; any other text names a placement file (docs/placement.md).
enum class PlacementRule { even, automatic };
inline constexpr EnumName<PlacementRule> kPlacementRuleNames[] = {
    {PlacementRule::even, "even"}, {PlacementRule::automatic, "auto", "GABRA on measured blocks"}};
constexpr EnumNames<PlacementRule> enum_names(PlacementRule) { return {"placement", kPlacementRuleNames}; }

// What a training step keeps for backward (gridnn-train --recompute, docs/design.md §6a).
enum class Recompute { none, blocks };
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::none, "none", "every layer keeps what its backward needs"},
    {Recompute::blocks, "blocks",
     "the stem, residual and attention blocks keep their input and run their forward again"}};
constexpr EnumNames<Recompute> enum_names(Recompute) { return {"recomputation", kRecomputeNames}; }

// The words that stand for something other than a file or a grid in --data and --grid.
inline constexpr char kSyntheticData[] = "synthetic";
inline constexpr char kAutoGrid[] = "auto";

struct DataOptions {
  std::string source = kSyntheticData;  // kSyntheticData or a CSV manifest of NIfTI volumes
  int64_t train_samples = 256;          // synthetic only
  int64_t val_samples = 128;            // synthetic only
  double val_fraction = 0.2;            // manifest rows without a split column
  bool augment = true;                  // random shifts / flips and fresh noise while training
  bool cache = false;                   // keep loaded training samples in memory (needs augment off)
  data::Fit fit = data::Fit::crop;      // NIfTI: crop (center crop or zero pad) | resample
  data::Orientation orientation = data::Orientation::canonical;  // NIfTI: closest RAS+ | stored voxel order
  double spacing = 0;  // NIfTI: resample to voxels of this many mm before the fit; 0: off
};

struct TrainOptions {
  Model model = Model::resattnet3d;
  nn::ResAttNetConfig resattnet;  // depth, width, attention switches (classes, channels below)
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

  std::string grid = "1x1";  // PrxPc or PsxPrxPc (docs/design.md §4); the job must have Ps*Pr*Pc processes
  // Pipeline stages (docs/design.md §7, models/train/pipelined_model.h): Ps (also given by a PsxPrxPc
  // grid), GPipe micro-batches per step, and where the stages cut the network: a
  // PlacementRule's name ("" is even) or a placement file (placement_rule below).
  int stages = 1;
  int micro_batches = 1;
  std::string placement;
  bool comm_report = false;    // print the per-layer communication table at the end
  bool profile = false;        // print where the steps' time went, by kind of work (core/profile.h), at the end
  std::string device = "cpu";  // cpu, cuda (under mpiexec: each rank of a node its own GPU) or cuda:N
  parallel::CommBackend comm_backend = parallel::CommBackend::automatic;
  ops::MathMode precision = ops::MathMode::fp32;
  uint64_t seed = 1;

  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t save_every = 0;      // steps; 0: at the end only
  int keep_checkpoints = 2;
  bool resume = false;
  std::string init_from;     // weights (safetensors, PyTorch names)
  std::string metrics_path;  // JSON lines
  int64_t eval_every = 0;    // steps; 0: at the end of every epoch
  bool progress = true;      // a progress bar on a terminal
  int64_t log_every = 10;    // steps between reads of the training loss (and its reports)

  // Running on a cluster (docs/cluster.md). They change where and how long ranks run, never
  // the results, so checkpoints do not record them.
  parallel::RankOrder rank_order = parallel::RankOrder::rows_in_node;
  double comm_timeout = 300;  // s one communication may wait; 0: forever
  OnSignal on_signal = OnSignal::save_exit;
  int requeue_exit_code = 75;  // the exit status after a signal's checkpoint
  SaveErrors save_errors = SaveErrors::stop;

  // Memory (docs/design.md §6a). They never change the results either.
  int64_t memory_limit = 0;    // bytes each rank's allocator may hold (pre-flight check and cap); 0: none
  bool memory_report = false;  // print each rank's predicted and measured peak at the end
  Recompute recompute = Recompute::none;
};

// The options as JSON (for checkpoints and the metrics file) and back.
std::string to_json(const TrainOptions& options);
TrainOptions options_from_json(const std::string& json);
// Checks what the options alone can tell (gridnn::Error saying which flag to change).
void validate(const TrainOptions& options);
// The rule options.placement names (empty: even), or nullopt for a placement file.
std::optional<PlacementRule> placement_rule(const TrainOptions& options);

// The network the options describe, with the layers of `layers` (a grid's, for domain and
// batch parallelism), its modules named (state_dict names), and initialized from
// options.seed unless `initialize` is false (a network built only to describe itself).
std::unique_ptr<nn::Module> build_model(const TrainOptions& options,
                                        const nn::LayerFactory& layers = nn::LayerFactory(), bool initialize = true);

}  // namespace gridnn::train
