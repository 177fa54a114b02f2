// BatchLoader: seeded epoch order, shards and slabs, one batch prefetched (std::async).
#include "models/data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace gridnn::data {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), 0);
  const uint64_t stream = philox_stream_id("loader.order") + uint64_t(epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto words = philox_words(seed, stream, uint64_t(i));
    const uint64_t r = (uint64_t(words.v[0]) << 32) | words.v[1];
    std::swap(order[size_t(i)], order[size_t(r % uint64_t(i + 1))]);
  }
  return order;
}

BatchLoader::BatchLoader(const Dataset& dataset, LoaderOptions options, LoaderPosition start)
    : dataset_(dataset), options_(options) {
  const int64_t n = dataset.size();
  GRIDNN_REQUIRE(options_.batch >= 1, "data loader: batch size must be >= 1, got ", options_.batch);
  GRIDNN_REQUIRE(!options_.drop_last || n >= options_.batch, "data loader: the dataset has ", n,
                 " samples, fewer than one batch of ", options_.batch, "; use a smaller --batch");
  if (options_.shard_end < 0) options_.shard_end = options_.batch;
  GRIDNN_REQUIRE(
      options_.shard_begin >= 0 && options_.shard_begin < options_.shard_end && options_.shard_end <= options_.batch,
      "data loader: shard [", options_.shard_begin, ", ", options_.shard_end, ") is not inside a batch of ",
      options_.batch);
  GRIDNN_REQUIRE(!(options_.cache && options_.augment),
                 "data loader: caching samples needs augmentation off (--no-augment): augmentation "
                 "draws every sample afresh each epoch");
  batches_per_epoch_ = options_.drop_last ? n / options_.batch : (n + options_.batch - 1) / options_.batch;
  const bool at_the_start = start.epoch == 0 && start.batch == 0;  // also of an empty set
  GRIDNN_REQUIRE(at_the_start || (start.epoch >= 0 && start.batch >= 0 && start.batch < batches_per_epoch_),
                 "data loader: cannot start at epoch ", start.epoch, " batch ", start.batch, " (an epoch has ",
                 batches_per_epoch_, " batches)");
  position_ = start;
  start_prefetch();
}

BatchLoader::~BatchLoader() { wait_prefetch(); }

void BatchLoader::wait_prefetch() noexcept {
  if (pending_.valid()) pending_.wait();  // its exception, if any, is dropped with it
}

void BatchLoader::start_prefetch() {
  if (!options_.prefetch || (options_.one_epoch && position_.epoch > 0)) return;
  const LoaderPosition at = position_;
  pending_ = std::async(std::launch::async, [this, at] { return load(at); });
}

Batch BatchLoader::next() {
  Batch batch = pending_.valid() ? pending_.get() : load(position_);
  if (++position_.batch == batches_per_epoch_) position_ = {position_.epoch + 1, 0};
  start_prefetch();
  return batch;
}

Batch BatchLoader::load(LoaderPosition position) const {
  const int64_t n = dataset_.size();
  const std::vector<int64_t> order =
      options_.shuffle ? epoch_order(n, options_.seed, position.epoch) : epoch_order(n, 0, -1);
  const int64_t first = position.batch * options_.batch;
  const int64_t rows_in_batch = std::min(options_.batch, n - first);
  const int64_t begin = std::min(options_.shard_begin, rows_in_batch);
  const int64_t end = std::min(options_.shard_end, rows_in_batch);

  const Shape s = dataset_.sample_shape();
  const int64_t depth = (options_.slab.d_end < 0 ? s[1] : options_.slab.d_end) - options_.slab.d_begin;
  Batch b;
  b.x = Tensor::empty({end - begin, s[0], depth, s[2], s[3]});
  b.y = Tensor::empty({end - begin}, DType::i64);
  const Augment augment{options_.augment, options_.seed, uint64_t(position.epoch)};
  for (int64_t r = begin; r < end; ++r) {
    const int64_t index = order[size_t(first + r)];
    Tensor row = b.x.narrow(r - begin, 1).reshape({s[0], depth, s[2], s[3]});
    b.y.data<int64_t>()[r - begin] = load_sample(index, row, augment);
    b.indices.push_back(index);
  }
  return b;
}

int64_t BatchLoader::load_sample(int64_t index, Tensor& row, const Augment& augment) const {
  if (!options_.cache) return dataset_.load(index, row, augment, options_.slab);
  {
    const std::lock_guard<std::mutex> lock(cache_mu_);
    const auto hit = cache_.find(index);
    if (hit != cache_.end()) {
      const float* from = hit->second.x.data<float>();
      std::copy(from, from + row.numel(), row.data<float>());
      return hit->second.label;
    }
  }
  const int64_t label = dataset_.load(index, row, augment, options_.slab);
  const std::lock_guard<std::mutex> lock(cache_mu_);
  cache_.emplace(index, CachedSample{row.clone(), label});
  return label;
}

}  // namespace gridnn::data
