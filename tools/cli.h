// What the gridnn-* programs share: reading sizes from the command line, and the shape of
// their main() (errors become one line on stderr and a non-zero exit status; under MPI one
// failing rank ends the whole job).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/train/options.h"
#include "parallel/process_grid.h"

namespace gridnn::cli {

// "32x48x40" -> {32, 48, 40}: three positive integers joined by 'x'. Otherwise a
// gridnn::Error "<flag>: expected DxHxW with positive integers (e.g. 32x32x32), got '...'".
std::array<int64_t, 3> parse_size(const std::string& flag, const std::string& text);

// The network flags of the programs that plan or measure a run (gridnn-plan,
// gridnn-calibrate): --model resattnet3d|mlp (and alexnet where `paper` is set), --depth,
// --width, --input, --in-channels, --classes, --mlp-sizes (in, hidden..., classes).
struct ModelFlags {
  std::string model = "resattnet3d";
  std::string input = "32x32x32";
  train::TrainOptions run;  // depth, width, channels, classes
  std::vector<int64_t> mlp_sizes{1024, 512, 10};
};
void add_model_flags(CLI::App& app, ModelFlags& flags, bool paper);
// The training options of the network the flags name (gridnn::Error for a bad --input or
// --mlp-sizes), with `batch` samples per step.
train::TrainOptions model_options(const ModelFlags& flags, int64_t batch);

// The process a program runs as: its world rank and size, and its place among the ranks of
// its node (`--device cuda` gives rank i of a node GPU i).
struct Process {
  int rank = 0, size = 1;
  int node_rank = 0, node_size = 1;
  std::vector<int> node_of_rank{0};  // every world rank's node (MpiSession::node_of_rank)
};

// The process grid of a program's run: `shape` over the job, with the options' communication
// backend and rank order, on the options' device; `--device cuda` is made "cuda:i" for the
// process's place i among its node's ranks (modulo the node's GPUs), and options.device says
// so afterwards.
std::unique_ptr<parallel::ProcessGrid> create_grid(const parallel::GridShape& shape, train::TrainOptions& options,
                                                   const Process& process);

// Runs `body` as the main() of a program that may run under mpiexec: in MPI builds inside
// an MpiSession (an exception on any rank ends the job with "gridnn: rank R failed: <why>";
// alone, "gridnn: error: <why>" and exit status 1), without MPI as one process with the
// same single-process message. Returns body's exit status.
int run_mpi_program(int* argc, char*** argv, const std::function<int(const Process&)>& body);

// Runs `body` as the main() of a single-process program: an exception prints
// "<program>: error: <why>" on stderr and returns 1.
int run_program(const char* program, const std::function<int()>& body);

}  // namespace gridnn::cli
