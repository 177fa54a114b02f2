// The per-rank memory of a training step, from the live network (plan/memory_model.h,
// docs/design.md §6a): the layers' own statements for the blocks a rank runs, and what lives
// across steps (parameters, gradients, optimizer state, the batch and the loader's
// prefetched batch). What --memory-report, --memory-limit's pre-flight check and
// gridnn-plan --memory-per-rank predict, and what test_memory compares with the allocators.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/layers/module.h"
#include "models/run/run_options.h"
#include "parallel/process_grid.h"
#include "plan/memory_model.h"

namespace gridnn::run {

// The bytes the memory model allows for small tensors no layer states (memory_plan.cpp).
constexpr int64_t kSmallTensorsBound = int64_t(64) << 10;

// The blocks one rank runs, and where they sit in the pipeline.
struct StageSpan {
  size_t begin = 0, end = 0;
  bool first = true, last = true;
};

// Copies of the parameters the optimizer keeps per parameter: SGD's momentum buffer, Adam's
// two moments.
int64_t optimizer_copies(const optim::OptimizerOptions& options);

// What a rank runs: a training step (gridnn-train), or gridnn-predict's batches, the forward
// alone, or with Grad-CAM the forward that keeps what backward needs and a backward to the
// input (a bound: Grad-CAM's backward stops at its layer). Prediction holds the model's tensors,
// one batch and its scans' volumes, no optimizer state, no prefetched batch.
enum class MemoryJob { training, prediction, explanation };

// The step of rank (row, col) of `grid` (one stage's Pr x Pc) running `span` of `model` (built
// for that grid) with `options`' batch, micro-batches, optimizer, data and device; `restored`:
// a checkpoint its setup reads (gridnn-train --resume), empty: none.
plan::MemoryStep memory_step(const RunOptions& options, nn::Module& model, const parallel::GridShape& grid, int row,
                             int col, const StageSpan& span, MemoryJob job = MemoryJob::training,
                             const std::string& restored = {});

// The predicted peak of every rank of a one-stage grid Pr x Pc, in rank order (row-major:
// rank r·Pc + c), of the network `options` build: each row's model built once on a planning
// grid, not initialized, as describe_grid does.
std::vector<plan::MemoryPeak> predict_grid_memory(const RunOptions& options, const parallel::GridShape& grid,
                                                  MemoryJob job = MemoryJob::training);
// The largest peak of them.
int64_t largest_peak(const std::vector<plan::MemoryPeak>& peaks);

// Every rank's value, in world rank order, on every rank (collective over the world).
std::vector<int64_t> per_rank(parallel::ProcessGrid& grid, int64_t value);
// The same for a text (a rank's --memory-report block): each rank's own, where rebuilding
// another rank's network to describe it would allocate past a --memory-limit at the end.
std::vector<std::string> per_rank(parallel::ProcessGrid& grid, const std::string& text);

// The high-water mark of bytes in use of the allocator that holds `device`'s tensors
// (AllocatorStats::peak_in_use): what the prediction is checked against.
int64_t measured_peak_bytes(const Device& device);

// "predicted 1.21 GiB, measured 1.18 GiB (-2.5%)" lines and the five largest holders at the
// predicted peak: the per-rank block of --memory-report.
std::string memory_report(int rank, const plan::MemoryPeak& predicted, int64_t measured);
// The line before the ranks' blocks of --memory-report, naming the allocator of `device`.
std::string memory_report_title(const Device& device);

}  // namespace gridnn::run
