// Checkpoints: one safetensors file per save, readable by PyTorch.
//
//   <dir>/step-00001200.safetensors
//     model tensors under their PyTorch names ("layer1.0.conv1.weight", "bn1.running_var")
//     optimizer state under "optimizer.<param>.<what>" ("optimizer.fc.weight.momentum_buffer")
//     __metadata__: format, step, epoch, batch (the data cursor), optimizer_steps, seed,
//                   grid, config (the run's options as JSON)
//
// Saving is atomic (core/safetensors.h: temporary file, fsync, rename), so a crash while
// saving leaves the previous checkpoints as they were; the newest `keep` files are kept.
// Resuming takes the newest file in the folder that reads back whole, and says which
// newer ones it skipped and why.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/layers/module.h"
#include "models/optim/optimizer.h"
#include "models/run/whole_state.h"

namespace gridnn::train {

// Where a run stands: what a checkpoint records beside the tensors.
struct RunState {
  int64_t step = 0;   // optimizer steps done
  int64_t epoch = 0;  // data cursor: the next batch to train on
  int64_t batch = 0;
  uint64_t seed = 0;
  std::string grid = "1x1";
  std::string config_json = "{}";
};

struct Checkpoint {
  std::string path;
  RunState state;
  std::map<std::string, Tensor> model;      // PyTorch names
  std::map<std::string, Tensor> optimizer;  // without the "optimizer." prefix
  int64_t optimizer_steps = 0;
};

// <dir>/step-<step, 8 digits>.safetensors
std::string checkpoint_path(const std::string& dir, int64_t step);

// Writes <dir>/step-<step>.safetensors (creating dir) and removes all but the newest
// `keep` checkpoints (keep >= 1). Returns the path written.
std::string save_checkpoint(const std::string& dir, nn::Module& model, const optim::Optimizer& optimizer,
                            const RunState& state, int keep = 2);

// As above with the tensors given: the whole model's and optimizer state's, which a grid
// or a pipeline gathers first (whole_state.h, the pipeline).
std::string save_checkpoint(const std::string& dir, const NamedTensors& model, const NamedTensors& optimizer_state,
                            int64_t optimizer_steps, const RunState& state, int keep = 2);

// Reads one checkpoint file (gridnn::Error naming it if it is not one, or is one of another
// format version).
Checkpoint read_checkpoint(const std::string& path);
// The newest readable checkpoint in `dir`, or nothing when there is none. Unreadable newer
// files are reported on stderr and skipped; a checkpoint of another format version is an
// error (gridnn::Error naming it), not skipped.
std::optional<Checkpoint> latest_checkpoint(const std::string& dir);
// The newest checkpoint file's path in `dir` (the one latest_checkpoint reads first), without
// reading it; empty when there is none.
std::string newest_checkpoint_path(const std::string& dir);

}  // namespace gridnn::train
