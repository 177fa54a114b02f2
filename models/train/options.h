// Everything a training run is configured by: what gridnn-train's flags settle into, what a
// checkpoint records (as JSON: the one place its settings are text) and what a resumed run
// checks against.
#pragma once

#include <cstdint>
#include <string>

#include "core/names.h"
#include "models/optim/schedule.h"
#include "models/run/run_options.h"

namespace gridnn::train {

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

// A training run: the run on the grid (models/run/run_options.h) and what only training
// has: its length, the learning-rate schedule, checkpoints, reports and stop signals.
struct TrainOptions : run::RunOptions {
  int64_t epochs = 0;  // one of epochs / steps; steps wins when both are set
  int64_t steps = 0;
  optim::ScheduleOptions schedule;  // schedule.base_lr is the learning rate

  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t save_every = 0;      // steps; 0: at the end only
  int keep_checkpoints = 2;
  bool resume = false;
  std::string metrics_path;  // JSON lines
  int64_t eval_every = 0;    // steps; 0: at the end of every epoch
  bool progress = true;      // a progress bar on a terminal
  int64_t log_every = 10;    // steps between reads of the training loss (and its reports)

  // Running on a cluster (docs/cluster.md): what a stop signal or a failed save does.
  OnSignal on_signal = OnSignal::save_exit;
  int requeue_exit_code = 75;  // the exit status after a signal's checkpoint
  SaveErrors save_errors = SaveErrors::stop;
};

// The options as JSON (for checkpoints and the metrics file) and back.
std::string to_json(const TrainOptions& options);
TrainOptions options_from_json(const std::string& json);
// Checks what the options alone can tell (gridnn::Error saying which flag to change): the
// run's (run::validate), then training's.
void validate(const TrainOptions& options);

}  // namespace gridnn::train
