// The per-rank memory model's replay of a step (memory_model.h).
#include "plan/memory_model.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"

namespace gridnn::plan {

namespace {

// The tensors alive during the replay: each with its bytes, its holders and the layer whose
// pass allocated it (what the peak's shares are grouped by).
class Replay {
 public:
  explicit Replay(int64_t resident) : resident_(resident) {}

  int make(int64_t bytes, const std::string& owner) {
    tensors_.push_back({bytes, 1, owner});
    live_ += bytes;
    return int(tensors_.size()) - 1;
  }
  void hold(int id) {
    if (id >= 0) ++tensors_[size_t(id)].holders;
  }
  void release(int id) {
    if (id < 0) return;
    Tensor& t = tensors_[size_t(id)];
    GRIDNN_REQUIRE(t.holders > 0, "memory model: ", t.owner, " released a tensor nobody holds");
    if (--t.holders == 0) live_ -= t.bytes;
  }
  int64_t bytes(int id) const { return id < 0 ? 0 : tensors_[size_t(id)].bytes; }
  // Nothing else holds tensor `id` (Tensor::sole_handle).
  bool sole(int id) const { return id >= 0 && tensors_[size_t(id)].holders == 1; }

  // A moment of the step: what is live now plus `extra` bytes of `who`'s that are about to be
  // allocated (its output, scratch, gradient).
  void moment(int64_t extra, const std::string& who, const std::string& at) {
    const int64_t now = resident_ + live_ + extra;
    if (now <= peak_) return;
    peak_ = now;
    at_ = at;
    std::map<std::string, int64_t> by_owner;
    for (const Tensor& t : tensors_)
      if (t.holders > 0) by_owner[t.owner] += t.bytes;
    if (extra > 0) by_owner[who] += extra;
    shares_.assign(by_owner.begin(), by_owner.end());
  }

  int64_t peak() const { return peak_; }
  int64_t live() const { return live_; }
  const std::string& at() const { return at_; }
  const std::vector<std::pair<std::string, int64_t>>& shares() const { return shares_; }

 private:
  struct Tensor {
    int64_t bytes;
    int holders;
    std::string owner;
  };
  std::vector<Tensor> tensors_;
  int64_t resident_, live_ = 0, peak_ = 0;
  std::string at_;
  std::vector<std::pair<std::string, int64_t>> shares_;
};

// What one layer record holds between its forward and its backward.
struct Saved {
  int kept = -1, input = -1, output = -1;
};

using Op = LayerMemory::Op;

// A recomputed block in the replay: where it begins and the input it keeps.
struct Region {
  size_t begin = 0;
  int input = -1;
};

void release_saved(Replay& r, Saved& s) {
  r.release(s.kept);
  r.release(s.input);
  r.release(s.output);
  s = Saved{};
}

// What an earlier micro-batch's forward left held (MemoryStep::micro_batches): its records'
// saved tensors and its recomputed blocks' inputs, each let go of as the next forward replaces
// it.
struct Earlier {
  std::vector<Saved> saved;
  std::map<size_t, Region> regions;
};

// The forward of layers [first, last) from the activation `current` (see memory_model.h);
// returns the output. What each record keeps goes to `saved`; a recomputed block's region to
// `regions` (by its end marker). With `earlier`, each record lets go of the input or output
// the earlier forward's same record held before it allocates (a layer replaces what it keeps
// first), and of the other tensors it kept once it holds its own (attention computes its new
// ones first; a bound).
int replay_forward(Replay& r, const std::vector<LayerMemory>& layers, size_t first, size_t last, int current,
                   std::vector<Saved>& saved, std::map<size_t, Region>& regions, const std::string& phase,
                   Earlier* earlier = nullptr) {
  std::vector<int> held;
  std::vector<Region> open;
  int wrapper_input = -1;  // held by a wrapper's caller through the next record's forward
  for (size_t i = first; i < last; ++i) {
    const LayerMemory& l = layers[i];
    switch (l.op) {
      case Op::fork:
        r.hold(current);
        held.push_back(current);
        break;
      case Op::branch:
        GRIDNN_REQUIRE(!held.empty(), "memory model: ", l.layer, " branches without a fork");
        std::swap(current, held.back());
        break;
      case Op::join: {
        GRIDNN_REQUIRE(!held.empty(), "memory model: ", l.layer, " joins without a fork");
        r.moment(l.output, l.layer, phase + "forward of " + l.layer);
        const int out = r.make(l.output, l.layer);
        r.release(current);
        r.release(held.back());
        held.pop_back();
        current = out;
        break;
      }
      case Op::recompute_begin:
        r.hold(current);  // the block's input stays for its second forward
        open.push_back({i, current});
        if (earlier)  // the block's stashed input of the earlier micro-batch is replaced
          for (auto& [end, region] : earlier->regions)
            if (region.begin == i) r.release(std::exchange(region.input, -1));
        break;
      case Op::recompute_end:
        GRIDNN_REQUIRE(!open.empty(), "memory model: ", l.layer, " ends a recomputed block it did not begin");
        for (size_t k = open.back().begin + 1; k < i; ++k) release_saved(r, saved[k]);
        regions[i] = open.back();
        open.pop_back();
        break;
      case Op::layer: {
        if (earlier) {
          Saved& e = earlier->saved[i];
          r.release(std::exchange(e.input, -1));
          r.release(std::exchange(e.output, -1));
        }
        r.moment(l.output + l.kept + l.forward_scratch, l.layer, phase + "forward of " + l.layer);
        Saved& s = saved[i];
        const int out = l.output > 0 ? r.make(l.output, l.layer) : current;
        if (l.output == 0) r.hold(out);
        if (l.kept > 0) s.kept = r.make(l.kept, l.layer);
        if (l.keeps_input) r.hold(s.input = current);
        if (l.keeps_output) r.hold(s.output = out);
        if (earlier) release_saved(r, earlier->saved[i]);
        r.release(wrapper_input);
        wrapper_input = -1;
        if (l.wraps_next)
          wrapper_input = current;
        else
          r.release(current);
        current = out;
        break;
      }
    }
  }
  r.release(wrapper_input);
  GRIDNN_REQUIRE(held.empty() && open.empty(), "memory model: a fork or recomputed block that does not end");
  return current;
}

// The backward of `layers` in reverse from the gradient `grad`, freeing what `saved` holds;
// a recomputed block's forward runs again first.
void replay_backward(Replay& r, const std::vector<LayerMemory>& layers, int grad, std::vector<Saved>& saved,
                     std::map<size_t, Region>& regions) {
  std::vector<int> held;
  std::vector<int> stashed;
  int container_dy = -1;  // held until the next fork (LayerMemory::dy_held_to_fork)
  for (size_t i = layers.size(); i-- > 0;) {
    const LayerMemory& l = layers[i];
    switch (l.op) {
      case Op::join:
        r.hold(grad);  // the same gradient reaches both paths
        held.push_back(grad);
        break;
      case Op::branch:
        std::swap(grad, held.back());
        break;
      case Op::fork: {
        const int other = held.back();
        held.pop_back();
        const int64_t sum = std::max(r.bytes(grad), r.bytes(other));
        r.moment(sum, l.layer, "backward of " + l.layer);
        const int out = grad < 0 && other < 0 ? -1 : r.make(sum, l.layer + " (grad)");
        r.release(grad);
        r.release(other);
        r.release(container_dy);
        container_dy = -1;
        grad = out;
        break;
      }
      case Op::recompute_end: {
        const Region region = regions.at(i);
        r.hold(region.input);
        r.release(replay_forward(r, layers, region.begin + 1, i, region.input, saved, regions, "recomputed "));
        stashed.push_back(region.input);
        break;
      }
      case Op::recompute_begin:
        r.release(stashed.back());
        stashed.pop_back();
        break;
      case Op::layer: {
        // dx takes dy's memory, unless dy is held elsewhere too (a residual block's shortcut
        // gradient): then the layer makes a new one.
        if (l.grad_in_place && r.sole(grad)) {
          r.moment(l.backward_scratch, l.layer + " (grad)", "backward of " + l.layer);
          release_saved(r, saved[i]);
          break;
        }
        r.moment(l.input_grad + l.backward_scratch, l.layer + " (grad)", "backward of " + l.layer);
        const int dx = l.input_grad > 0 ? r.make(l.input_grad, l.layer + " (grad)") : -1;
        if (l.dy_held_to_fork)
          container_dy = grad;
        else
          r.release(grad);
        release_saved(r, saved[i]);
        grad = dx;
        break;
      }
    }
  }
}

}  // namespace

int64_t forward_held_bytes(const std::vector<LayerMemory>& layers) {
  Replay r(0);
  std::vector<Saved> saved(layers.size());
  std::map<size_t, Region> regions;
  replay_forward(r, layers, 0, layers.size(), r.make(0, "input"), saved, regions, "");
  return r.live();
}

MemoryPeak simulate_memory(const MemoryStep& step) {
  kernels::Workspace workspace{};
  for (const auto* layers : {&step.layers, &step.evaluation})
    for (const LayerMemory& l : *layers)
      for (size_t s = 0; s < workspace.size(); ++s) workspace[s] = std::max(workspace[s], l.workspace[s]);
  int64_t workspace_bytes = 0;
  for (int64_t w : workspace) workspace_bytes += w;
  // Each module's state once (the evaluation forward runs the same modules).
  int64_t layer_state = 0;
  for (const LayerMemory& l : step.layers.empty() ? step.evaluation : step.layers) layer_state += l.state;
  int64_t resident = workspace_bytes + layer_state + step.micro_batch_stash + step.device_batch_bytes;
  for (const MemoryItem& item : step.resident) resident += item.bytes;

  // The training step. The input is the batch's (a resident item), so its bytes are not
  // counted twice; the output stays with the caller through backward, which the loss starts.
  Replay r(resident);
  r.moment(0, "", "the start of the step");
  std::vector<Saved> saved(step.layers.size());
  std::map<size_t, Region> regions;
  if (step.micro_batches > 1) {  // the forward of the one before the last (its output sent on)
    Earlier earlier{std::vector<Saved>(step.layers.size()), {}};
    r.release(
        replay_forward(r, step.layers, 0, step.layers.size(), r.make(0, "input"), earlier.saved, earlier.regions, ""));
    replay_forward(r, step.layers, 0, step.layers.size(), r.make(0, "input"), saved, regions,
                   "next micro-batch: ", &earlier);
    for (auto& [end, region] : earlier.regions) r.release(region.input);
    for (Saved& s : earlier.saved) release_saved(r, s);
  } else {
    replay_forward(r, step.layers, 0, step.layers.size(), r.make(0, "input"), saved, regions, "");
  }
  r.moment(step.loss_grad_bytes, "loss", "the loss");
  replay_backward(r, step.layers, step.loss_grad_bytes > 0 ? r.make(step.loss_grad_bytes, "loss") : -1, saved, regions);
  // Evaluation: a forward that keeps nothing for a backward, after the step (whose stashed
  // micro-batch inputs and batch on the device are gone by then), beside the validation
  // loader's batches.
  const int64_t evaluation_resident =
      resident - step.micro_batch_stash - step.device_batch_bytes + step.evaluation_batch_bytes;
  Replay e(evaluation_resident);
  std::vector<Saved> evaluation(step.evaluation.size());
  replay_forward(e, step.evaluation, 0, step.evaluation.size(), e.make(0, "input"), evaluation, regions,
                 "evaluation: ");
  const Replay& worst = e.peak() > r.peak() ? e : r;

  // Once the step's activations are gone (0: nothing held then).
  const int64_t after = step.after_step_bytes > 0 ? resident + step.after_step_bytes : 0;

  MemoryPeak p;
  if (step.setup_bytes > 0 && step.setup_bytes + layer_state > std::max(worst.peak(), after)) {
    p.peak_bytes = p.resident_bytes = step.setup_bytes + layer_state;
    p.layer_state_bytes = layer_state;
    p.at = "setup";
    p.shares = {{"the network as built (and a weights file read)", step.setup_bytes}};
    if (layer_state > 0) p.shares.push_back({"layer state (batch norm's statistics)", layer_state});
    p.training = {r.peak() - resident, r.at()};
    if (!step.evaluation.empty()) p.evaluation = {e.peak() - evaluation_resident, e.at()};
    return p;
  }
  if (after > worst.peak()) {
    p.peak_bytes = after;
    p.resident_bytes = resident;
    p.workspace_bytes = workspace_bytes;
    p.layer_state_bytes = layer_state;
    p.at = "end of the step";
    for (const MemoryItem& item : step.resident)
      if (item.bytes > 0) p.shares.push_back({item.what, item.bytes});
    p.shares.push_back({"held after the step", step.after_step_bytes});
    p.training = {r.peak() - resident, r.at()};
    std::stable_sort(p.shares.begin(), p.shares.end(),
                     [](const MemoryShare& a, const MemoryShare& b) { return a.bytes > b.bytes; });
    return p;
  }
  p.training = {r.peak() - resident, r.at()};
  if (!step.evaluation.empty()) p.evaluation = {e.peak() - evaluation_resident, e.at()};
  p.peak_bytes = worst.peak();
  p.resident_bytes = &worst == &e ? evaluation_resident : resident;
  p.activation_bytes = worst.peak() - p.resident_bytes;
  p.workspace_bytes = workspace_bytes;
  p.layer_state_bytes = layer_state;
  p.at = worst.at();
  for (const MemoryItem& item : step.resident)
    if (item.bytes > 0) p.shares.push_back({item.what, item.bytes});
  if (workspace_bytes > 0) p.shares.push_back({"convolution workspace", workspace_bytes});
  if (layer_state > 0) p.shares.push_back({"layer state (batch norm's statistics)", layer_state});
  if (step.micro_batch_stash > 0 && &worst == &r)
    p.shares.push_back({"micro-batch inputs (stash)", step.micro_batch_stash});
  if (step.device_batch_bytes > 0 && &worst == &r)
    p.shares.push_back({"batch (on the device)", step.device_batch_bytes});
  if (&worst == &e && step.evaluation_batch_bytes > 0)
    p.shares.push_back({"validation batches (and a stage's input)", step.evaluation_batch_bytes});
  for (const auto& [who, bytes] : worst.shares())
    if (bytes > 0) p.shares.push_back({who, bytes});
  std::stable_sort(p.shares.begin(), p.shares.end(),
                   [](const MemoryShare& a, const MemoryShare& b) { return a.bytes > b.bytes; });
  return p;
}

}  // namespace gridnn::plan
