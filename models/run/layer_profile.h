// gridnn-train --profile's per-layer table: where each rank's step goes, layer by layer, so
// that a grid's ranks can be set beside each other and beside the 1x1 run (which layer got
// no faster with half the planes, which waited at its halo or its all-reduce).
//
//   | layer | r0 fwd | r0 bwd | r0 comm | r1 fwd | r1 bwd | r1 comm |
//   | stem.conv | 9.81 | 21.40 | 0.52 | 9.77 | 21.02 | 0.61 |
//   ...
//   | (gradient_sync) | 1.20 | | | 1.31 | | |
//   | (outside layers) | 4.02 | | | 3.97 | | |
//   | (step) | 121.3 | | | 121.2 | | |
//
// Milliseconds per profiled step. fwd and bwd: the layer's exclusive time in each pass
// (core/profile.h: its scopes and the kernels' inside them); comm: the seconds its
// communication was exposed (parallel/communicator.h's CommRecord, labelled by
// CommLayerScope), already inside fwd + bwd. Then the step's own kinds (gradient sync,
// optimizer, data), the time outside every layer and kind (losses, residual adds, linear
// layers, bookkeeping), and the step.
#pragma once

#include <map>
#include <string>

#include "core/profile.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gridnn::run {

// The communication seconds per layer of the records [first, end) of comm_log(): call with
// the log's size before a profiled step, after it.
void add_comm_seconds(size_t first, std::map<std::string, double>& seconds_by_layer);

// The table above, every rank's columns in world rank order, on every rank. Collective over
// the world: every rank calls it with its own profiler, comm seconds, profiled time and steps.
std::string layer_profile_table(parallel::ProcessGrid& grid, const Profiler& profiler,
                                const std::map<std::string, double>& comm_seconds, double step_seconds, int64_t steps);

}  // namespace gridnn::run
