// Batch shards and the training loop's own collectives.
#include "models/run/grid_batch.h"

#include <vector>

#include "core/error.h"
#include "kernels/layout.h"

namespace gridnn::run {

parallel::Range shard_rows(const parallel::GridShape& grid, int col, int64_t batch) {
  return parallel::balanced_range(batch, grid.cols, col);
}

parallel::Range shard_planes(const parallel::GridShape& grid, int row, int64_t depth) {
  return parallel::balanced_range(depth, grid.rows, row);
}

BatchShard batch_shard(const parallel::ProcessGrid& grid, int64_t batch, int64_t depth) {
  const parallel::GridShape& g = grid.shape();
  GRIDNN_REQUIRE(batch >= g.cols, "--batch ", batch, " is smaller than the grid's ", g.cols, " batch shards (--grid ",
                 g.str(), "): every shard needs a sample; use --batch >= ", g.cols);
  GRIDNN_REQUIRE(depth >= g.rows, "--input depth ", depth, " is smaller than the grid's ", g.rows,
                 " depth slabs (--grid ", g.str(), ")");
  return {shard_rows(g, grid.col_rank(), batch), shard_planes(g, grid.row_rank(), depth)};
}

data::LoaderOptions shard_loader(data::LoaderOptions o, const BatchShard& shard) {
  o.shard_begin = shard.rows.begin;
  o.shard_end = shard.rows.end;
  o.slab = {shard.depth.begin, shard.depth.end};
  return o;
}

data::Batch take_shard(const data::Batch& full, const BatchShard& shard) {
  data::Batch out;
  out.x = ops::slice(full.x.narrow(shard.rows.begin, shard.rows.size()), 2, shard.depth.begin, shard.depth.size());
  out.y = full.y.narrow(shard.rows.begin, shard.rows.size()).clone();
  for (int64_t r = shard.rows.begin; r < shard.rows.end && size_t(r) < full.indices.size(); ++r)
    out.indices.push_back(full.indices[size_t(r)]);
  return out;
}

Tensor gather_rows(parallel::ProcessGrid& grid, const Tensor& local) {
  parallel::Communicator& col = grid.col();
  if (col.size() == 1) return local;
  // Every shard's row count first: the last batch of an epoch may be uneven.
  Tensor counts = Tensor::zeros({col.size()}, DType::i64);
  counts.data<int64_t>()[col.rank()] = local.size(0);
  col.all_reduce(counts);
  std::vector<int64_t> rows = counts.to_vector<int64_t>();
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  Tensor out = Tensor::empty(local.shape().with(0, total), local.dtype(), local.device());
  col.all_gatherv(local, out, rows);
  return out;
}

double sum_over_batch(parallel::ProcessGrid& grid, double value) {
  if (grid.col().size() == 1) return value;
  // gridnn's tensors have no f64: the value travels as two floats, its f32 rounding and the
  // rest, which keeps about 48 of its bits.
  const float high = float(value), low = float(value - double(high));
  Tensor t = Tensor::from_vector(std::vector<float>{high, low}, {2});
  grid.col().all_reduce(t);
  const auto sums = t.to_vector<float>();
  return double(sums[0]) + double(sums[1]);
}

void sum_over_batch(parallel::ProcessGrid& grid, Tensor& t) {
  if (grid.col().size() > 1) grid.col().all_reduce(t);
}

}  // namespace gridnn::run
