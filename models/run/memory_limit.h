// --memory-limit (docs/design.md §6a): the pre-flight check of a run's predicted peaks
// against the limit, what would fit instead, and the allocators' cap.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/run/memory_plan.h"
#include "models/run/pipelined_model.h"

namespace gridnn::run {

// --memory-limit's pre-flight check, collective over the world, before the first step: when
// the predicted peak of any rank passes options.memory_limit, throws gridnn::Error on every
// rank naming that rank's peak and the limit, its largest holders, and what would fit (grids
// of the same process count, a smaller batch, more micro-batches); else caps the allocator of
// the model's device at the limit, so that a step that needs more fails there, naming the
// layer. `own`: this rank's prediction. Nothing without a limit.
void enforce_memory_limit(const RunOptions& options, PipelinedModel& model, parallel::ProcessGrid& grid,
                          const plan::MemoryPeak& own);
// The same check for any job: `what_fits` (called on a refusal only) says what would fit.
void enforce_memory_limit(int64_t limit, const Device& device, parallel::ProcessGrid& grid, const plan::MemoryPeak& own,
                          const std::function<std::string()>& what_fits);
// "--grid 2x2 (812.0 MiB per rank)" for every other one-stage grid of g's process count on
// which every rank of `job` fits under `limit`.
std::vector<std::string> grids_that_fit(const RunOptions& options, const parallel::GridShape& g, int64_t limit,
                                        MemoryJob job);
// "what fits: a, b" or, with nothing in `fits`, what is left to try.
std::string what_fits_text(const std::vector<std::string>& fits);

}  // namespace gridnn::run
