// What one rank of a process grid holds of a batch, and the few collectives the training
// loop itself needs (docs/design.md §4): rank (r, c) holds rows balanced_range(B, Pc, c) of every
// global batch, and of each of its samples the depth planes balanced_range(D, Pr, r).
// Logits are replicated over the row (after the global pooling), so the loss needs only
// the col communicator.
#pragma once

#include <cstdint>

#include "models/data/loader.h"
#include "parallel/process_grid.h"

namespace gridnn::run {

struct BatchShard {
  parallel::Range rows;   // of the global batch
  parallel::Range depth;  // of each sample
};

// The rule itself, for any position of a grid shape: the rows of a global batch of `batch`
// that batch shard `col` holds, and the planes of a sample of depth `depth` that row position
// `row` holds. Every place that needs a shard's rows or planes asks these two. No checks: a
// part may be empty (gridnn-predict's last, short batch).
parallel::Range shard_rows(const parallel::GridShape& grid, int col, int64_t batch);
parallel::Range shard_planes(const parallel::GridShape& grid, int row, int64_t depth);
// This rank's shard of a run's batches (--batch, --input depth). Throws gridnn::Error when a
// rank would hold no rows or no planes, saying what to change.
BatchShard batch_shard(const parallel::ProcessGrid& grid, int64_t batch, int64_t depth);
// The loader options that read just this shard.
data::LoaderOptions shard_loader(data::LoaderOptions options, const BatchShard& shard);
// This rank's part of a whole batch (x [B, C, D, H, W], y [B]; copies).
data::Batch take_shard(const data::Batch& full, const BatchShard& shard);
// Every batch shard's rows of `local` ([rows, ...], replicated over the row) stacked in
// col order: the global batch's. A 1x1 grid returns `local`.
Tensor gather_rows(parallel::ProcessGrid& grid, const Tensor& local);
// The sum of `value` over the batch shards (the col communicator), to about 48 bits.
double sum_over_batch(parallel::ProcessGrid& grid, double value);
// The same for a tensor on any device, in place (f32: a training step's loss, which stays on
// the device).
void sum_over_batch(parallel::ProcessGrid& grid, Tensor& t);

}  // namespace gridnn::run
