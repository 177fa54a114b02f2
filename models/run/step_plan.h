// One training step as the cost model sees it (plan/cost_model.h, docs/design.md §6), from
// the live network: its modules describe their layers and collectives (nn::Module::
// describe), and the step adds its own — the loss summed over the batch shards and the
// gradients summed over the ranks each layer declared. What `--grid auto` and gridnn-plan
// estimate, and what test_words compares with the communicators' counts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/layers/module.h"
#include "models/nets/layer_factory.h"
#include "models/run/run_options.h"
#include "parallel/process_grid.h"
#include "plan/cost_model.h"
#include "plan/node_layout.h"

namespace gridnn::run {

// The step of `model` (built for this grid) on rank (row, col) of `grid`: its batch shard of
// `batch` samples of shape `sample` [C, D, H, W] (rows balanced over Pc, depth planes over
// Pr), the loss all-reduce over col, then one gradient all-reduce per communicator that
// sums gradients (each bucket of GradientSync is a part of it), in the order of the
// communicators' names.
// With --recompute blocks, the forward collectives of each recomputed block come twice.
plan::RankStep describe_step(nn::Module& model, const parallel::GridShape& grid, int row, int col, int64_t batch,
                             const Shape& sample, Recompute recompute = Recompute::none);
// The network `options` build for row `row` of a one-stage grid Pr x Pc, not initialized:
// the single-process layers on 1 x 1, models/dist/'s on a planning grid
// (parallel::ProcessGrid::planned) otherwise. Members in the order they must outlive each other.
struct PlannedModel {
  std::unique_ptr<parallel::ProcessGrid> grid;
  std::unique_ptr<nn::LayerFactory> layers;
  std::unique_ptr<nn::Module> model;
};
PlannedModel planned_model(const RunOptions& options, const parallel::GridShape& grid, int row);

// The step on every rank (row, col) of `grid` (its stages ignored: one stage) of the network
// `options` build: built once per row on a planning grid (parallel::ProcessGrid::planned),
// not initialized.
std::vector<plan::RankStep> describe_grid(const RunOptions& options, const parallel::GridShape& grid);
// The same, estimated: plan::estimate_ranks over every rank.
plan::PlanCost estimate_grid(const RunOptions& options, const parallel::GridShape& grid, const plan::Machine& m);
// Whether the run can use a grid of `rows` x `cols`: each batch shard needs a sample
// (Pc <= batch), each depth slab a plane of the input (Pr <= D), and a switch to the batch
// split (options.batch_split_from) its even shares (batch_split_fits).
bool usable_grid(const RunOptions& options, int rows, int cols);
// Every usable factorization Pr x Pc of `procs` (Pr ascending), estimated.
std::vector<plan::PlanCost> sweep_grids(const RunOptions& options, int procs, const plan::Machine& m);
// The network `options` build as one process runs it: its layers' shapes, for the paper's
// strategies (plan::estimate with plan::Strategy), named "ResAttNet3D-18" or "MLP".
plan::Network network_of(const RunOptions& options);

// The switch to the batch split (RunOptions::batch_split_from) with the least predicted step
// on `grid` at `m`: every block where the run can switch (check_batch_split) and, with
// options.memory_limit, every rank's predicted peak fits, against none. `block` is empty
// where none is possible (one row), or where the best is not kBatchSplitMinGain faster than
// none: without slabs timed on the grid (run::time_slabs) the model prices a layer on a slab
// at its share of the whole volume's time, and slabs of the early layers measured up to 1.4x
// faster than that (bench/results/grid-scaling.md), so smaller predicted gains are not real ones.
inline constexpr double kBatchSplitMinGain = 0.03;
struct BatchSplitChoice {
  std::string block;
  double step_s = 0;     // predicted with the choice
  double without_s = 0;  // predicted without a switch
  std::string why;       // the candidates and their predicted steps, for the programs to print
};
BatchSplitChoice choose_batch_split(const RunOptions& options, const parallel::GridShape& grid, const plan::Machine& m);

// Every usable grid of the cluster's N·G ranks (Pr ascending), each in both rank orders
// (rows-in-node first), each communicator at the link it crosses (plan/node_layout.h).
std::vector<plan::NodePlan> sweep_grids_on_nodes(const RunOptions& options, const plan::NodeCluster& c,
                                                 const plan::Machine& m);
}  // namespace gridnn::run
