// A pipelined model's training step: GPipe's schedule over this rank's partition of the
// blocks, the loss, the gradient synchronization (pipelined_model.h).
#include "models/run/pipelined_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/math_mode.h"
#include "models/dist/factory.h"
#include "models/run/grid_batch.h"
#include "models/run/memory_plan.h"
#include "models/run/whole_state.h"

namespace gridnn::run {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Tags of the pipe messages: activation or gradient (the header's is one more). Messages
// between two ranks with one tag arrive in the order they were sent, which is the schedule's
// order of the micro-batches on both sides, so the tags need not name the micro-batch.
constexpr int kActivationTag = 0, kGradientTag = 2;
constexpr int kMaxRank = 6;

// The rows of micro-batch m among a shard's `rows` rows that start at global row `offset`:
// the global rows i with i % M == m. Interleaved, so that a micro-batch holds the same
// samples whatever the batch shards are (grid-invariant batch-norm statistics), and every
// shard of at least M rows has some of each micro-batch.
std::vector<int64_t> micro_batch_rows(int64_t offset, int64_t rows, int M, int m) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rows; ++i)
    if ((offset + i) % M == m) out.push_back(i);
  return out;
}

// The given rows of t (dimension 0), as a new tensor; all of t when they are all its rows.
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  if (int64_t(rows.size()) == t.size(0)) return t;
  Tensor out = Tensor::empty(t.shape().with(0, int64_t(rows.size())), t.dtype(), t.device());
  for (size_t k = 0; k < rows.size(); ++k) out.narrow(int64_t(k), 1).copy_from(t.narrow(rows[k], 1));
  return out;
}

}  // namespace

std::unique_ptr<nn::LayerFactory> layers_for(parallel::ProcessGrid& grid, const RunOptions& o) {
  if (grid.shape().rows == 1 && grid.shape().cols == 1) return std::make_unique<nn::LayerFactory>();
  return std::make_unique<nn::GridLayerFactory>(grid, o.batch_split_from, o.halo);
}

bool batch_split_fits(const RunOptions& o, const parallel::GridShape& grid) {
  if (o.batch_split_from.empty() || grid.rows == 1) return true;
  for (int c = 0; c < grid.cols; ++c)
    if (shard_rows(grid, c, o.batch).size() % (int64_t(o.micro_batches) * grid.rows) != 0) return false;
  return true;
}

void check_batch_split(const RunOptions& o, const nn::BlockNetwork& net, const parallel::GridShape& grid) {
  if (o.batch_split_from.empty()) return;
  GRIDNN_REQUIRE(o.model == Model::resattnet3d, "--batch-split-from: only ResAttNet3D switches its layers' ",
                 "distribution; the ", enum_name(o.model), " network cannot");
  const std::vector<std::string> names = net.block_names();
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  GRIDNN_REQUIRE(std::find(names.begin(), names.end(), o.batch_split_from) != names.end(), "--batch-split-from ",
                 o.batch_split_from, " names no block of the network; its blocks are ", all);
  const int M = o.micro_batches;
  GRIDNN_REQUIRE(batch_split_fits(o, grid), "--batch-split-from ", o.batch_split_from, " splits each batch shard's ",
                 "micro-batches over the ", grid.rows, " ranks of a row, but --batch ", o.batch, " on grid ",
                 grid.str(), M > 1 ? " with --micro-batches " + std::to_string(M) : std::string(), " gives shards of ",
                 shard_rows(grid, 0, o.batch).size(), " samples or fewer; use a --batch whose ",
                 "shards are multiples of ", int64_t(M) * grid.rows, ", or no --batch-split-from");
}

PipelinedModel::PipelinedModel(const RunOptions& o, parallel::ProcessGrid& grid)
    : grid_(grid),
      device_(o.device),
      classes_(o.classes),
      layers_(layers_for(grid, o)),
      micro_batches_(o.micro_batches) {
  require_device(device_);
  model_ = build_model(o, *layers_);
  net_ = dynamic_cast<nn::BlockNetwork*>(model_.get());
  GRIDNN_REQUIRE(net_, "a training step needs a network made of blocks (ResAttNet3D or MLP)");
  check_batch_split(o, *net_, grid.shape());
  if (!o.batch_split_from.empty()) split_rows_ = grid.shape().rows;
  if (!o.init_from.empty()) load_model_tensors(*model_, read_weights(o.init_from), o.init_from);
  model_->to(device_);
  // Convolutions and GEMMs in the chosen math; parameters, gradients and optimizer state
  // stay fp32 (master weights). On the CPU, reduced modes are emulated (for tests).
  model_->set_math_mode(o.precision);
  model_->train();

  const int stages = grid.shape().stages;
  GRIDNN_REQUIRE(placement_rule(o) == PlacementRule::even || stages > 1,
                 "--placement needs pipeline stages (--stages K or --grid PsxPrxPc)");
  GRIDNN_REQUIRE(micro_batches_ >= 1, "--micro-batches must be at least 1, got ", micro_batches_);
  // The smallest batch shard must hold a row of every micro-batch (the same check on every
  // rank, so that all of them stop alike).
  GRIDNN_REQUIRE(micro_batches_ == 1 || o.batch / grid.shape().cols >= micro_batches_, "--micro-batches ",
                 micro_batches_, " needs at least as many samples in every batch shard; --batch ", o.batch, " over ",
                 grid.shape().cols, " shards gives ", o.batch / grid.shape().cols,
                 "; lower --micro-batches or raise --batch");
  placement_ = choose_placement(o, *net_, grid);
  plan::validate(placement_, int(net_->block_count()), stages, net_->block_names());
  GRIDNN_REQUIRE(placement_.partitions() == stages, "the placement has ", placement_.partitions(),
                 " partitions but the grid ", grid.shape().str(), " has ", stages, " stages; give --stages ",
                 placement_.partitions(), " or another placement");
  partition_ =
      int(std::find(placement_.device.begin(), placement_.device.end(), grid.stage()) - placement_.device.begin());
  begin_ = size_t(placement_.begin(partition_));
  end_ = size_t(placement_.end(partition_, int(net_->block_count())));
  GRIDNN_REQUIRE(o.recompute == Recompute::none || net_->has_recomputable_blocks(), "--recompute ",
                 enum_name(o.recompute), ": the ", enum_name(o.model),
                 " network has no residual or attention blocks to recompute; use --recompute none");
  net_->set_recompute(o.recompute == Recompute::blocks);
  optimizer_ = optim::make_optimizer(o.optimizer, partition_parameters());
  set_gradient_sync(true);
}

PipelinedModel::~PipelinedModel() = default;

bool PipelinedModel::mine(const std::string& tensor_name) const {
  const size_t b = net_->block_of(tensor_name);
  return b >= begin_ && b < end_;
}

optim::ParameterList PipelinedModel::partition_parameters() {
  optim::ParameterList params;
  for (auto& [name, p] : model_->named_parameters())
    if (mine(name)) params.emplace_back(name, p);
  return params;
}

int PipelinedModel::partition_of_block(size_t block) const {
  for (int k = placement_.partitions(); k-- > 0;)
    if (size_t(placement_.begin(k)) <= block) return k;
  return 0;
}

void PipelinedModel::set_gradient_sync(bool overlap, int64_t bucket_bytes) {
  // With stages the backward runs block by block between pipe messages: its gradients are
  // summed after it.
  overlap_ = overlap && stages() == 1;
  sync_ = std::make_unique<GradientSync>(*model_, partition_parameters(), bucket_bytes);
}

Tensor PipelinedModel::forward_backward(const data::Batch& shard, int64_t global_rows, Tensor* logits) {
  model_->train();
  const int64_t rows = shard.y.size(0);
  const int M = micro_batches_;
  // Every shard has at least M rows (checked at construction for every rank alike).
  GRIDNN_REQUIRE(rows >= M, "training step: ", M, " micro-batches need at least as many rows per batch shard, got ",
                 rows);
  const int64_t offset = shard_rows(grid_.shape(), grid_.col_rank(), global_rows).begin;
  // The labels are checked here, on the host: on the device they are not read back.
  if (last()) nn::check_labels(shard.y, classes_, "training batch");
  const Tensor x = first() ? shard.x.on(device_) : Tensor();
  const Tensor y = last() ? shard.y.on(device_) : Tensor();

  // Forward: every micro-batch through this partition; the last one computes the loss, summed
  // on the device (nothing is read back in a step, docs/design.md §2).
  const size_t n = size_t(M);
  std::vector<Tensor> inputs(n), dlogits(n), outputs(n);
  std::vector<std::vector<int64_t>> micro_rows(n);
  Tensor loss = Tensor::zeros({1}, DType::f32, device_);
  for (int m = 0; m < M; ++m) {
    micro_rows[size_t(m)] = micro_batch_rows(offset, rows, M, m);
    inputs[size_t(m)] = first() ? take_rows(x, micro_rows[size_t(m)]) : receive(partition_ - 1, kActivationTag);
    Tensor out;
    try {
      out = net_->forward_blocks(begin_, end_, inputs[size_t(m)]);
    } catch (const BackendError&) {
      throw;  // a CUDA, NCCL or MPI failure: its own message says what failed
    } catch (const Error& e) {
      if (M == 1) throw;
      // Typically batch norm with too few values: say that a micro-batch is what it saw.
      throw Error(std::string(e.what()) + " (in micro-batch " + std::to_string(m) + " of " + std::to_string(M) + ", " +
                  std::to_string((global_rows - m + M - 1) / M) + " of the batch's " + std::to_string(global_rows) +
                  " samples; each micro-batch runs and is normalized on its own: lower --micro-batches or raise "
                  "--batch)");
    }
    if (last()) {
      parallel::CommLayerScope scope("loss");
      loss_.compute(out, take_rows(y, micro_rows[size_t(m)]));
      ops::axpy(1.0f, loss_.sum(), loss);
      dlogits[size_t(m)] = loss_.backward(global_rows);
      outputs[size_t(m)] = out;
    } else {
      send(out, partition_ + 1, kActivationTag);
    }
  }
  if (last()) {
    *logits = M == 1 ? outputs[0] : Tensor::empty(Shape{rows, outputs[0].size(1)}, DType::f32, device_);
    for (int m = 0; M > 1 && m < M; ++m)
      for (size_t k = 0; k < micro_rows[size_t(m)].size(); ++k)
        logits->narrow(micro_rows[size_t(m)][k], 1).copy_from(outputs[size_t(m)].narrow(int64_t(k), 1));
  }
  {
    parallel::CommLayerScope scope("loss");
    if (last()) {
      sum_over_batch(grid_, loss);
      ops::scale(loss, float(1.0 / double(global_rows)));
    }
    if (stages() > 1) share_outputs(logits, &loss);
  }
  // A loss that is not finite is found when the trainer reads it (once per logging interval,
  // and before every checkpoint): its updates are never saved.

  // Backward, last micro-batch first (its layer state is the live one); the others are
  // recomputed from their stashed inputs with the buffers put back afterwards. The
  // gradient buckets start during the last backward (the first micro-batch's).
  model_->zero_grad();
  sync_->on_zero_grad();
  std::vector<std::pair<std::string, Tensor*>> buffers;
  for (auto& [name, b] : model_->named_buffers())
    if (mine(name)) buffers.emplace_back(name, b);
  const auto start = Clock::now();
  for (int m = M; m-- > 0;) {
    if (m != M - 1) {
      std::vector<Tensor> kept;
      kept.reserve(buffers.size());
      for (auto& [name, b] : buffers) kept.push_back(b->clone());
      net_->forward_blocks(begin_, end_, inputs[size_t(m)]);
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second->copy_from(kept[i]);
    }
    const Tensor dy = last() ? dlogits[size_t(m)] : receive(partition_ + 1, kGradientTag);
    Tensor dx;
    if (overlap_ && m == 0) {
      sync_->begin();
      nn::BackwardObserverScope watch(*sync_);  // buckets start as their layers finish
      dx = net_->backward_blocks(begin_, end_, dy);
    } else {
      dx = net_->backward_blocks(begin_, end_, dy);
    }
    if (!first()) send(dx, partition_ - 1, kGradientTag);
  }
  timing_.backward_seconds = seconds_since(start);
  const auto sync_start = Clock::now();
  if (overlap_)
    sync_->finish();
  else
    sync_->reduce();
  timing_.sync_seconds = seconds_since(sync_start);
  return loss;
}

plan::MemoryStep PipelinedModel::memory_step(const RunOptions& o, const std::string& restored) {
  const parallel::GridShape& g = grid_.shape();
  return run::memory_step(o, *model_, {1, g.rows, g.cols}, grid_.row_rank(), grid_.col_rank(),
                          {begin_, end_, first(), last()}, MemoryJob::training, restored);
}

double PipelinedModel::evaluate(const data::Batch& shard, Tensor* logits) {
  // The last validation batch may leave a batch shard empty; the whole row then skips it
  // together (its ranks share the shard), so no collective is left waiting.
  if (shard.x.size(0) == 0) {
    *logits = Tensor::empty({0, classes_});
    return 0.0;
  }
  model_->eval();
  const nn::NoBackwardScope no_backward;  // layers keep nothing for a backward
  // Past a switch to the batch split the row splits the shard evenly: a shard that does not
  // split (the last validation batch) is padded with copies of its last sample, whose
  // outputs are dropped. In evaluation each sample's output is its own (batch norm uses its
  // running statistics), so the others' do not change.
  const int64_t rows = shard.y.size(0);
  const int64_t padded = (rows + split_rows_ - 1) / split_rows_ * split_rows_;
  std::vector<int64_t> padding_rows(size_t(padded), rows - 1);
  for (int64_t i = 0; i < rows; ++i) padding_rows[size_t(i)] = i;
  Tensor loss_sum;
  Tensor h = first() ? take_rows(shard.x, padding_rows).on(device_) : receive(partition_ - 1, kActivationTag);
  h = net_->forward_blocks(begin_, end_, h);
  if (last()) {
    nn::check_labels(shard.y, classes_, "validation batch");
    if (padded != rows) h = h.narrow(0, rows).clone();
    loss_.compute(h, shard.y.on(device_));
    loss_sum = loss_.sum();
    *logits = h;
  } else {
    send(h, partition_ + 1, kActivationTag);
  }
  if (stages() > 1) share_outputs(logits, &loss_sum);
  model_->train();
  return double(loss_sum.to_vector<float>()[0]);
}

// ---- the pipe --------------------------------------------------------------------------

// A header (rank, then the sizes) and the data, on the pipe communicator.
void PipelinedModel::send(const Tensor& t, int to_partition, int tag) {
  GRIDNN_REQUIRE(t.defined() && t.rank() <= kMaxRank && t.dtype() == DType::f32, "pipeline: stage ", partition_,
                 " has no f32 tensor of rank <= ", kMaxRank, " to send");
  std::vector<int64_t> header(kMaxRank + 1, 0);
  header[0] = t.rank();
  for (int d = 0; d < t.rank(); ++d) header[size_t(d) + 1] = t.size(d);
  const Tensor h = Tensor::from_vector(header, Shape{kMaxRank + 1});
  Tensor none;
  parallel::CommLayerScope scope("pipeline");
  parallel::Communicator& pipe = grid_.pipe();
  pipe.send_recv(h, group_of(to_partition), none, -1, tag + 1);
  pipe.send_recv(t, group_of(to_partition), none, -1, tag);
}

Tensor PipelinedModel::receive(int from_partition, int tag) {
  parallel::Communicator& pipe = grid_.pipe();
  parallel::CommLayerScope scope("pipeline");
  Tensor header = Tensor::empty(Shape{kMaxRank + 1}, DType::i64);
  pipe.send_recv(Tensor(), -1, header, group_of(from_partition), tag + 1);
  const int64_t* h = header.data<int64_t>();
  std::vector<int64_t> dims(h + 1, h + 1 + h[0]);
  Tensor t = Tensor::empty(Shape(dims), DType::f32, device_);
  pipe.send_recv(Tensor(), -1, t, group_of(from_partition), tag);
  return t;
}

void PipelinedModel::share_outputs(Tensor* logits, Tensor* loss) {
  parallel::Communicator& pipe = grid_.pipe();
  const int root = group_of(placement_.partitions() - 1);
  Tensor sizes =
      Tensor::from_vector(std::vector<int64_t>{last() ? logits->size(0) : 0, last() ? logits->size(1) : 0}, Shape{2});
  pipe.broadcast(sizes, root);
  const int64_t* n = sizes.data<int64_t>();
  if (!last()) *logits = Tensor::empty(Shape{n[0], n[1]}, DType::f32, device_);
  if (n[0] > 0) pipe.broadcast(*logits, root);
  if (!last()) *loss = Tensor::empty(Shape{1}, DType::f32, device_);
  pipe.broadcast(*loss, root);
}

std::string PipelinedModel::describe_stages() const {
  const std::vector<nn::BlockInfo>& blocks = net_->blocks();
  std::string text;
  for (int k = 0; k < placement_.partitions(); ++k) {
    const int b = placement_.begin(k), e = placement_.end(k, int(blocks.size()));
    text += (k ? "; " : "") + std::string("stage ") + std::to_string(k) + ": " + blocks[size_t(b)].name +
            (e - b > 1 ? " .. " + blocks[size_t(e - 1)].name : "") + " (" + std::to_string(e - b) +
            (e - b == 1 ? " block" : " blocks") + ") on stage group " + std::to_string(group_of(k));
  }
  return text;
}

}  // namespace gridnn::run
