// Pipeline stages: GPipe's schedule over a placement of the network's blocks (pipeline.h).
#include "models/train/pipeline.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "models/train/checkpoint.h"
#include "models/train/grid_batch.h"

namespace gridnn::train {

namespace {

nn::BlockNetwork& as_blocks(nn::Module& model) {
  auto* net = dynamic_cast<nn::BlockNetwork*>(&model);
  GRIDNN_REQUIRE(net, "pipeline stages need a network made of blocks (ResAttNet3D or MLP)");
  return *net;
}

// Tags of the pipe messages: activation or gradient (the header's is one more). Messages
// between two ranks with one tag arrive in the order they were sent, which is the schedule's
// order of the micro-batches on both sides, so the tags need not name the micro-batch.
constexpr int kActivationTag = 0, kGradientTag = 2;

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

constexpr int kMaxRank = 6;

}  // namespace

Pipeline::Pipeline(nn::Module& model, parallel::ProcessGrid& grid, plan::Placement placement, int micro_batches)
    : model_(model), net_(as_blocks(model)), grid_(grid), placement_(std::move(placement)),
      micro_batches_(micro_batches) {
  const int stages = grid.shape().stages;
  GRIDNN_REQUIRE(micro_batches >= 1, "--micro-batches must be at least 1, got ", micro_batches);
  plan::validate(placement_, int(net_.block_count()), stages, net_.block_names());
  GRIDNN_REQUIRE(placement_.partitions() == stages, "the placement has ", placement_.partitions(),
                 " partitions but the grid ", grid.shape().str(), " has ", stages,
                 " stages; give --stages ", placement_.partitions(), " or another placement");
  partition_ = int(std::find(placement_.device.begin(), placement_.device.end(), grid.stage()) -
                   placement_.device.begin());
  begin_ = size_t(placement_.begin(partition_));
  end_ = size_t(placement_.end(partition_, int(net_.block_count())));
  const auto params = model_.named_parameters();
  device_ = params.empty() ? Device::cpu() : params.front().second->value.device();
}

optim::ParameterList Pipeline::parameters() const {
  optim::ParameterList mine;
  for (auto& [name, p] : model_.named_parameters()) {
    const size_t b = net_.block_of(name);
    if (b >= begin_ && b < end_) mine.emplace_back(name, p);
  }
  return mine;
}

int Pipeline::partition_of_block(size_t block) const {
  for (int k = placement_.partitions(); k-- > 0;)
    if (size_t(placement_.begin(k)) <= block) return k;
  return 0;
}

Tensor Pipeline::run_forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = begin_; i < end_; ++i) h = net_.forward_block(i, h);
  return h;
}

Tensor Pipeline::run_backward(const Tensor& dy) {
  Tensor g = dy;
  for (size_t i = end_; i-- > begin_;) g = net_.backward_block(i, g);
  return g;
}

// A header (rank, then the sizes) and the data, on the pipe communicator.
void Pipeline::send(const Tensor& t, int to_partition, int tag) {
  GRIDNN_REQUIRE(t.defined() && t.rank() <= kMaxRank && t.dtype() == DType::f32,
                 "pipeline: stage ", partition_, " has no f32 tensor of rank <= ", kMaxRank, " to send");
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

Tensor Pipeline::receive(int from_partition, int tag) {
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

void Pipeline::share_outputs(Tensor* logits, double* loss) {
  parallel::Communicator& pipe = grid_.pipe();
  const int root = group_of(placement_.partitions() - 1);
  Tensor sizes = Tensor::from_vector(std::vector<int64_t>{last() ? logits->size(0) : 0, last() ? logits->size(1) : 0},
                                     Shape{2});
  pipe.broadcast(sizes, root);
  const int64_t* n = sizes.data<int64_t>();
  if (!last()) *logits = Tensor::empty(Shape{n[0], n[1]}, DType::f32, device_);
  if (n[0] > 0) pipe.broadcast(*logits, root);
  // The loss travels as two floats (high and low part) to keep about 48 bits.
  const float high = float(*loss);
  Tensor parts = Tensor::from_vector(std::vector<float>{high, float(*loss - double(high))}, Shape{2});
  pipe.broadcast(parts, root);
  *loss = double(parts.data<float>()[0]) + double(parts.data<float>()[1]);
}

double Pipeline::forward_backward(const data::Batch& shard, int64_t global_rows, nn::SoftmaxCrossEntropy& loss,
                                  Tensor* logits) {
  const int64_t rows = shard.y.size(0);
  const int M = micro_batches_;
  // Every shard has at least M rows (checked by ModelOnGrid for every rank alike).
  GRIDNN_REQUIRE(rows >= M, "pipeline: ", M, " micro-batches need at least as many rows per batch shard, got ", rows);
  const int64_t offset = parallel::balanced_range(global_rows, grid_.shape().cols, grid_.col_rank()).begin;
  const Tensor x = first() ? shard.x.to(device_) : Tensor();
  const Tensor y = last() ? shard.y.to(device_) : Tensor();

  // Forward: every micro-batch through this partition; the last one computes the loss.
  const size_t n = static_cast<size_t>(M);
  std::vector<Tensor> inputs(n), dlogits(n), outputs(n);
  std::vector<std::vector<int64_t>> micro_rows(n);
  double loss_sum = 0;
  for (int m = 0; m < M; ++m) {
    micro_rows[size_t(m)] = micro_batch_rows(offset, rows, M, m);
    inputs[size_t(m)] = first() ? take_rows(x, micro_rows[size_t(m)]) : receive(partition_ - 1, kActivationTag);
    Tensor out;
    try {
      out = run_forward(inputs[size_t(m)]);
    } catch (const BackendError&) {
      throw;  // a CUDA, NCCL or MPI failure: its own message says what failed
    } catch (const Error& e) {
      if (M == 1) throw;
      // Typically batch norm with too few values: say that a micro-batch is what it saw.
      throw Error(std::string(e.what()) + " (in micro-batch " + std::to_string(m) + " of " + std::to_string(M) +
                  ", " + std::to_string((global_rows - m + M - 1) / M) + " of the batch's " +
                  std::to_string(global_rows) +
                  " samples; each micro-batch runs and is normalized on its own: lower --micro-batches or raise "
                  "--batch)");
    }
    if (last()) {
      parallel::CommLayerScope scope("loss");
      loss.forward(out, take_rows(y, micro_rows[size_t(m)]));
      loss_sum += loss.loss_sum();
      dlogits[size_t(m)] = loss.backward(global_rows);
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
  double mean = 0;
  {
    parallel::CommLayerScope scope("loss");
    if (last()) mean = sum_over_batch(grid_, loss_sum) / double(global_rows);
    share_outputs(logits, &mean);
  }
  if (!std::isfinite(mean)) return mean;  // every stage stops alike; nothing was changed

  // Backward, last micro-batch first (its layer state is the live one); the others are
  // recomputed from their stashed inputs with the buffers put back afterwards.
  model_.zero_grad();
  std::vector<std::pair<std::string, Tensor*>> buffers;
  for (auto& [name, b] : model_.named_buffers()) {
    const size_t block = net_.block_of(name);
    if (block >= begin_ && block < end_) buffers.emplace_back(name, b);
  }
  for (int m = M; m-- > 0;) {
    if (m != M - 1) {
      std::vector<Tensor> kept;
      for (auto& [name, b] : buffers) kept.push_back(b->clone());
      run_forward(inputs[size_t(m)]);
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second->copy_from(kept[i]);
    }
    const Tensor dy = last() ? dlogits[size_t(m)] : receive(partition_ + 1, kGradientTag);
    const Tensor dx = run_backward(dy);
    if (!first()) send(dx, partition_ - 1, kGradientTag);
  }
  return mean;
}

double Pipeline::evaluate(const data::Batch& shard, nn::SoftmaxCrossEntropy& loss, Tensor* logits) {
  double loss_sum = 0;
  Tensor h = first() ? shard.x.to(device_) : receive(partition_ - 1, kActivationTag);
  h = run_forward(h);
  if (last()) {
    loss.forward(h, shard.y.to(device_));
    loss_sum = loss.loss_sum();
    *logits = h;
  } else {
    send(h, partition_ + 1, kActivationTag);
  }
  share_outputs(logits, &loss_sum);
  return loss_sum;
}

void Pipeline::share_model() {
  parallel::Communicator& pipe = grid_.pipe();
  for (auto& [name, t] : model_tensors(model_)) {
    Tensor view = t;  // shares the storage: the broadcast writes into the model
    pipe.broadcast(view, group_of(partition_of_block(net_.block_of(name))));
  }
}

void Pipeline::share_gradients() {
  parallel::Communicator& pipe = grid_.pipe();
  for (auto& [name, p] : model_.named_parameters()) pipe.broadcast(p->grad, group_of(partition_of_block(net_.block_of(name))));
}

NamedTensors Pipeline::full_optimizer_state(const optim::Optimizer& optimizer) {
  // The kinds of state each parameter has ("momentum_buffer"; "exp_avg", "exp_avg_sq"),
  // in the optimizer's order; the same on every stage (same options, same steps).
  const NamedTensors own = optimizer.state();
  std::vector<std::string> kinds;
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : own) {
    const std::string kind = name.substr(name.rfind('.') + 1);
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
    by_name.emplace(name, t);
  }
  parallel::Communicator& pipe = grid_.pipe();
  Tensor count = Tensor::from_vector(std::vector<int64_t>{int64_t(kinds.size()), -int64_t(kinds.size())}, Shape{2});
  pipe.all_reduce(count, parallel::ReduceOp::max);
  GRIDNN_REQUIRE(count.data<int64_t>()[0] == -count.data<int64_t>()[1],
                 "pipeline: the stages' optimizers hold different kinds of state; they must take the same steps");
  NamedTensors all;
  for (auto& [name, p] : model_.named_parameters()) {
    const size_t block = net_.block_of(name);
    const bool mine = block >= begin_ && block < end_;
    for (const std::string& kind : kinds) {
      const std::string key = name + "." + kind;
      auto it = by_name.find(key);
      GRIDNN_REQUIRE(!mine || it != by_name.end(), "pipeline: the optimizer has no '", key,
                     "' though other parameters have '", kind, "'; the stages must hold the same kinds of state");
      Tensor t = mine ? it->second.clone() : Tensor::zeros(p->value.shape(), DType::f32, p->value.device());
      pipe.broadcast(t, group_of(partition_of_block(block)));
      all.emplace_back(key, t);
    }
  }
  return all;
}

std::string Pipeline::describe() const {
  const std::vector<nn::BlockInfo>& blocks = net_.blocks();
  std::string text;
  for (int k = 0; k < placement_.partitions(); ++k) {
    const int b = placement_.begin(k), e = placement_.end(k, int(blocks.size()));
    text += (k ? "; " : "") + std::string("stage ") + std::to_string(k) + ": " + blocks[size_t(b)].name +
            (e - b > 1 ? " .. " + blocks[size_t(e - 1)].name : "") + " (" + std::to_string(e - b) +
            (e - b == 1 ? " block" : " blocks") + ") on stage group " + std::to_string(group_of(k));
  }
  return text;
}

}  // namespace gridnn::train
