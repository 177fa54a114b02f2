// SplitBatch and GatherBatch: the row's hand-over from depth slabs to batch shards and back
// to replicated features (see the header).
#include "models/dist/batch_split.h"

#include <algorithm>

#include "core/profile.h"

namespace gridnn::nn {

// ---- SplitBatch ------------------------------------------------------------------------

SplitBatch::SplitBatch(parallel::Communicator& row, int64_t split_depth)
    : Module("SplitBatch"), row_(row), split_depth_(split_depth) {
  require_layer(split_depth == 0 || split_depth >= row.size(), "SplitBatch",
                std::to_string(split_depth) + " planes split over " + std::to_string(row.size()) +
                    " row ranks leave a rank without planes");
}

parallel::BlockSplit SplitBatch::samples(int64_t batch) const { return {&row_, 0, batch, 1}; }
parallel::BlockSplit SplitBatch::planes() const { return {&row_, 2, split_depth_, 1}; }

void SplitBatch::check_batch(int64_t batch) const {
  require_layer(batch > 0 && batch % row_.size() == 0, name(),
                "splits the batch evenly over the " + std::to_string(row_.size()) + " ranks of a row from here " +
                    "on, but a batch shard (or micro-batch) holds " + std::to_string(batch) + " sample" +
                    (batch == 1 ? "" : "s") + ": use a --batch whose every shard and micro-batch is a multiple of " +
                    std::to_string(row_.size()) + ", or no --batch-split-from");
}

Tensor SplitBatch::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 5 && (split_depth_ == 0 || x.size(2) == planes().own().size()), name(),
                "expects " +
                    (split_depth_ ? "this rank's " + std::to_string(planes().own().size()) + " of " +
                                        std::to_string(split_depth_) + " depth planes [B, C, d, H, W]"
                                  : std::string("whole volumes [B, C, D, H, W]")) +
                    ", got " + (x.defined() ? x.str() : std::string("(undefined)")));
  check_batch(x.size(0));
  batch_ = x.size(0);
  const ProfileScope profile(ProfileKind::reorder, name(), ProfilePass::forward);
  parallel::CommLayerScope scope(name());
  if (split_depth_ == 0) return parallel::own_block(x, samples(batch_));
  return parallel::redistribute_blocks(x, planes(), samples(batch_));
}

Tensor SplitBatch::do_backward(const Tensor& dy) {
  require_layer(batch_ > 0, name(), "backward called before forward");
  if (!input_gradient_) return Tensor();
  const int64_t own = samples(batch_).own().size();
  require_layer(
      dy.defined() && dy.rank() == 5 && dy.size(0) == own && (split_depth_ == 0 || dy.size(2) == split_depth_), name(),
      "dy must hold this rank's " + std::to_string(own) + " samples, whole, got " +
          (dy.defined() ? dy.str() : std::string("(undefined)")));
  const ProfileScope profile(ProfileKind::reorder, name(), ProfilePass::backward);
  parallel::CommLayerScope scope(name());
  if (split_depth_ == 0) return parallel::gather_blocks(dy, samples(batch_));
  return parallel::redistribute_blocks(dy, samples(batch_), planes());
}

Shape SplitBatch::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5 && (split_depth_ == 0 || in[2] == planes().own().size()), name(),
                "cannot run on an input " + in.str());
  check_batch(in[0]);
  const parallel::BlockSplit batch = samples(in[0]);
  const int64_t own = batch.own().size();
  const Shape out = in.with(0, own).with(2, split_depth_ ? split_depth_ : in[2]);
  const int64_t sample = in[1] * in[3] * in[4];  // elements of one sample's plane
  const int procs = row_.size();
  plan::LayerMemory m;
  m.layer = name();
  m.output = activation_bytes(out);
  m.input_grad = input_gradient_ ? activation_bytes(in) : 0;
  if (split_depth_ == 0) {  // forward: own rows; backward: every row rank's rows gathered
    m.forward_scratch = 0;
    step.memory.push_back(m);
    if (!input_gradient_) return out;
    plan::CommCall c = plan::make_call(name(), "row", "all_gatherv", own * sample * in[2], procs,
                                       double((in[0] - own) * sample * in[2]));
    c.backward = true;
    step.calls.push_back(c);
    return out;
  }
  // Each round holds a copy of the part it sends and a buffer for the part it receives; the
  // first copies this rank's own part.
  const parallel::BlockSplit depth = planes();
  int64_t most[2] = {in.numel() / std::max<int64_t>(1, procs), out.numel() / std::max<int64_t>(1, procs)};
  for (const bool backward : {false, true}) {
    if (backward && !input_gradient_) break;
    const Shape block = backward ? out : in;
    for (int d = 1; d < procs; ++d) {
      const parallel::RedistributeRound round = backward ? parallel::redistribute_round(block, batch, depth, d)
                                                         : parallel::redistribute_round(block, depth, batch, d);
      most[backward] = std::max(most[backward], round.sent + round.received);
      plan::CommCall c = plan::make_call(name(), "row", "send_recv", round.sent, procs, double(round.received));
      c.backward = backward;
      step.calls.push_back(c);
    }
  }
  m.forward_scratch = activation_bytes({most[0]});
  m.backward_scratch = input_gradient_ ? activation_bytes({most[1]}) : 0;
  step.memory.push_back(m);
  return out;
}

// ---- GatherBatch -----------------------------------------------------------------------

GatherBatch::GatherBatch(parallel::Communicator& row, std::unique_ptr<Module> layer)
    : Module("GatherBatch"), row_(row) {
  layer_ = &register_module("", std::move(layer));
}

Tensor GatherBatch::forward(const Tensor& x) {
  const Tensor y = layer_->forward(x);
  parallel::CommLayerScope scope(name());
  Tensor out = Tensor::empty(y.shape().with(0, y.size(0) * row_.size()), y.dtype(), y.device());
  row_.all_gather(y, out);  // SplitBatch gave every rank as many samples
  return out;
}

Tensor GatherBatch::do_backward(const Tensor& dy) {
  const int p = row_.size();
  require_layer(dy.defined() && dy.rank() >= 1 && dy.size(0) % p == 0, name(),
                "dy must hold the samples of the " + std::to_string(p) + " ranks of the row, got " +
                    (dy.defined() ? dy.str() : std::string("(undefined)")));
  // The head after it is replicated on the row: dy is the same on every rank; keep own rows.
  const int64_t own = dy.size(0) / p;
  return layer_->backward(dy.narrow(own * row_.rank(), own).clone());
}

Shape GatherBatch::describe(const Shape& in, plan::RankStep& step) const {
  const Shape y = layer_->describe(in, step);
  const int p = row_.size();
  step.calls.push_back(plan::make_call(name(), "row", "all_gather", y.numel(), p, double((p - 1) * y.numel())));
  plan::LayerMemory m;
  m.layer = name();
  m.output = activation_bytes(y.with(0, y[0] * p));
  m.backward_scratch = activation_bytes(y);  // this rank's rows of dy
  step.memory.push_back(m);
  return y.with(0, y[0] * p);
}

}  // namespace gridnn::nn
