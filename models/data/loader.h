// BatchLoader: batches of a Dataset in a seeded order, the next one loaded in the
// background while the current one trains.
//
// Epoch e visits the samples in a permutation drawn from (seed, e) (or in order without
// shuffling); batch b of it holds permuted positions [b * batch, (b + 1) * batch). A rank
// of the grid reads only rows [shard_begin, shard_end) of every batch and only its depth
// slab (docs/design.md §4), and sees exactly the values the single-process run sees there. The
// position (epoch, batch) is all the state there is: a resumed run's loader starts at it and
// continues with the very same batches.
#pragma once

#include <cstdint>
#include <future>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "models/data/dataset.h"

namespace gridnn::data {

struct Batch {
  Tensor x;                      // f32 [rows, C, D or slab depth, H, W], CPU
  Tensor y;                      // i64 [rows], CPU
  std::vector<int64_t> indices;  // dataset index of each row
};

struct LoaderOptions {
  int64_t batch = 8;  // global batch size
  bool shuffle = true;
  bool drop_last = true;    // false: the last batch of an epoch may be smaller
  uint64_t seed = 1;        // order (and augmentation) key
  bool augment = false;     // pass Augment{true, seed, epoch} to the dataset
  int64_t shard_begin = 0;  // rows of each global batch this rank reads
  int64_t shard_end = -1;   // -1: to the end of the batch
  DepthSlab slab;           // depth planes this rank reads
  bool prefetch = true;     // load the next batch on a background thread
  bool one_epoch = false;   // read for one epoch: nothing is prefetched past its end (validation)
  // Keep every sample this rank loads in memory and copy it from there in later epochs, so
  // files are read and decoded (or synthetic volumes drawn) once. Needs augment = false
  // (augmentation draws each sample afresh every epoch); costs the rank's share of the
  // dataset in host memory.
  bool cache = false;
};

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // within the epoch
};

class BatchLoader {
 public:
  // Starts at `start` (a resumed run's position), prefetching that batch.
  BatchLoader(const Dataset& dataset, LoaderOptions options, LoaderPosition start = {});
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The position of the batch next() returns.
  LoaderPosition position() const { return position_; }
  // The batch at position(), then advances (to the next epoch after its last batch).
  // Errors of a background load (a bad file) are thrown here.
  Batch next();
  // The batch at any position, loaded now on this thread.
  Batch load(LoaderPosition position) const;

 private:
  void start_prefetch();
  void wait_prefetch() noexcept;

  const Dataset& dataset_;
  LoaderOptions options_;
  int64_t batches_per_epoch_;
  LoaderPosition position_;
  std::future<Batch> pending_;  // the batch at position_, when prefetching

  // The cache (options_.cache): dataset index -> its row (this rank's slab) and label. The
  // prefetch thread and the caller may both load, hence the lock.
  struct CachedSample {
    Tensor x;
    int64_t label;
  };
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<int64_t, CachedSample> cache_;
  int64_t load_sample(int64_t index, Tensor& row, const Augment& augment) const;
};

// The permutation of [0, n) for epoch `epoch` under `seed` (Fisher-Yates on Philox draws).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace gridnn::data
