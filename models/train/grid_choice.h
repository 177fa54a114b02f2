// --grid auto: the grid the cost model (plan/cost_model.h, docs/design.md §6) finds fastest
// for this run's network and batch on `procs` processes, among the grids this run can use
// (every batch shard needs a sample, every depth slab a plane of the input). Each grid is
// estimated from the network's own description of its step there (step_plan.h): the words
// test_words checks against a real run.
#pragma once

#include <string>

#include "models/train/options.h"
#include "parallel/process_grid.h"

namespace gridnn::train {

// A one-line account of the choice goes to *why ("2x2 of 1x4, 2x2, 4x1: predicted
// communication 1.2 ms per step; pure batch (1x4) 2.3 ms"). The machine is assumed to be one
// node (α 2 µs, 10 GB/s); compute is left out (it is the same on every grid).
parallel::GridShape choose_grid(const TrainOptions& options, int procs, std::string* why);

}  // namespace gridnn::train
