// The per-rank memory of a training step (memory_plan.h).
#include "models/run/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/allocator.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "models/nets/blocks.h"
#include "models/run/gradient_sync.h"
#include "models/run/grid_batch.h"
#include "models/run/step_plan.h"

namespace gridnn::run {

namespace fs = std::filesystem;

using nn::activation_bytes;

int64_t optimizer_copies(const optim::OptimizerOptions& o) {
  if (o.kind == optim::OptimizerKind::sgd) return o.momentum != 0.0 ? 1 : 0;
  return 2;
}

namespace {

// What the allocator being described holds for `t` (nn::SizeClassScope).
int64_t tensor_bytes(const Tensor& t) { return nn::stored_bytes(t.numel() * int64_t(dtype_size(t.dtype()))); }

const nn::BlockNetwork& blocks_of(const nn::Module& model) {
  const auto* net = dynamic_cast<const nn::BlockNetwork*>(&model);
  GRIDNN_REQUIRE(net, "the memory model: ", model.name(), " is not a network of blocks");
  return *net;
}

// The rows of the validation loader's batches that shard `rows` of a batch reads: the most of
// one batch (what the evaluation forward runs) and of two in a row (the current batch and the
// one it prefetches). A synthetic validation set states its size: its last batch is short, and
// of a short batch a shard reads only the rows the batch has (data::BatchLoader). A manifest's
// set, and a row that pads its last batch to split it (--batch-split-from), count full ones.
struct ValidationRows {
  int64_t one = 0, two = 0;
};
ValidationRows validation_rows(const RunOptions& o, parallel::Range rows) {
  const int64_t full = rows.size();
  if (!o.data.synthetic() || !o.batch_split_from.empty()) return {full, 2 * full};
  const int64_t batches = o.data.val_samples / o.batch, in_last = o.data.val_samples % o.batch;
  const int64_t last = std::max<int64_t>(0, std::min(rows.end, in_last) - std::min(rows.begin, in_last));
  if (batches == 0) return {last, last};
  return {full, batches == 1 ? full + last : 2 * full};
}

}  // namespace

namespace {

// The layers of `span` on one micro-batch `in` (the input of the span's first block), each
// recomputed block framed by its markers, then the loss on the last stage (which keeps the
// probabilities and starts backward with dL/dlogits) or the gradient the next stage sends.
void training_layers(const RunOptions& o, const nn::BlockNetwork& net, const StageSpan& span, const Shape& in,
                     plan::MemoryStep& step) {
  plan::RankStep described;
  Shape out = in;
  for (size_t i = span.begin; i < span.end; ++i) {
    const bool again = o.recompute == Recompute::blocks && net.recomputable(i);
    plan::LayerMemory marker;
    marker.layer = net.blocks()[i].name;
    marker.op = plan::LayerMemory::Op::recompute_begin;
    if (again) described.memory.push_back(marker);
    out = net.describe_block(i, out, described);
    marker.op = plan::LayerMemory::Op::recompute_end;
    if (again) described.memory.push_back(marker);
  }
  step.layers = std::move(described.memory);
  step.input_bytes = activation_bytes(in);
  if (span.last) {
    plan::LayerMemory loss;
    loss.layer = "loss";
    loss.kept = loss.input_grad = activation_bytes(out);
    step.layers.push_back(loss);
  } else {
    step.loss_grad_bytes = activation_bytes(out);  // received from the next stage
  }
}

// The layers of an evaluation forward of `span` on `in`, keeping nothing for a backward
// (nn::NoBackwardScope).
std::vector<plan::LayerMemory> evaluation_layers(const nn::BlockNetwork& net, const StageSpan& span, const Shape& in) {
  plan::RankStep whole;
  net.describe_blocks(span.begin, span.end, in, whole);
  for (plan::LayerMemory& l : whole.memory) {
    l.forward_scratch += l.kept;  // made, then let go of as the forward ends
    l.kept = 0;
    l.keeps_input = l.keeps_output = false;
  }
  return std::move(whole.memory);
}

}  // namespace

plan::MemoryStep memory_step(const RunOptions& o, nn::Module& model, const parallel::GridShape& grid, int row, int col,
                             const StageSpan& span, MemoryJob job, const std::string& restored) {
  const nn::BlockNetwork& net = blocks_of(model);
  const nn::SizeClassScope classes(o.device);  // every tensor in its allocator's size class
  const int64_t rows = shard_rows(grid, col, o.batch).size();
  const int64_t planes = shard_planes(grid, row, o.input[0]).size();
  const int M = job == MemoryJob::training ? o.micro_batches : 1;
  const int64_t micro = (rows + M - 1) / M;  // the largest micro-batch (interleaved rows)
  const Shape batch{rows, o.in_channels, planes, o.input[1], o.input[2]};
  // The shape at the span's first block, of the shard and of one micro-batch (past a switch
  // to the batch split their first dimension is not the rows').
  auto at_span = [&](const Shape& in) {
    plan::RankStep before;
    return span.begin > 0 ? net.describe_blocks(0, span.begin, in, before) : in;
  };
  const Shape at = at_span(batch);

  plan::MemoryStep step;
  // Resident: every stage builds the whole network; only its own part is optimized and synced.
  // A synced gradient is a view of the gradient arena (GradientSync): one tensor of all of
  // them, counted once.
  int64_t parameters = 0, buffers = 0, optimized = 0, synced = 0, built = 0, split = 0;
  for (auto& [name, p] : model.named_parameters()) {
    parameters += tensor_bytes(p->value);
    built += tensor_bytes(p->value) + tensor_bytes(p->grad);
    const size_t b = net.block_of(name);
    const bool mine = b >= span.begin && b < span.end;
    const parallel::Communicator* sum_over = p->layout.grad_sum_over;
    if (mine && sum_over && sum_over->size() > 1)
      synced += gradient_slot_elements(p->value.numel()) * int64_t(sizeof(float));
    else
      parameters += tensor_bytes(p->grad);
    if (mine) optimized += tensor_bytes(p->value);
    if (mine && p->layout.split_over) split += tensor_bytes(p->value);
  }
  parameters += nn::stored_bytes(synced);
  for (auto& [name, b] : model.named_buffers()) buffers += tensor_bytes(*b);
  // Setup: the network as built holds each gradient on its own (a size class each) until
  // GradientSync lets them go for the arena; a weights file read then (--init-from;
  // gridnn-predict's checkpoint; a checkpoint resumed) has every tensor in it at once beside
  // the network's own, and a resumed one's optimizer entries reach the optimizer's state, a
  // split parameter's through a copy of this rank's part (run::part_of).
  int64_t file = 0;
  for (const std::string& path : {o.init_from, restored})
    if (!path.empty() && fs::is_regular_file(path))
      for (int64_t bytes : safetensors_tensor_bytes(path)) file += nn::stored_bytes(bytes);
  const int64_t restoring = restored.empty() ? 0 : optimizer_copies(o.optimizer) * (optimized + split);
  step.setup_bytes = std::max(built, parameters) + buffers + file + restoring + kSmallTensorsBound;
  // A loader's batch of `n` rows: volumes and labels.
  auto batch_bytes_of = [&](int64_t n) {
    return n == 0 ? 0 : activation_bytes(batch.with(0, n)) + nn::stored_bytes(n * int64_t(sizeof(int64_t)));
  };
  const int64_t batch_bytes = batch_bytes_of(rows);
  const bool on_cpu = o.device.is_cpu();
  step.resident.push_back({"parameters and gradients", parameters});
  step.resident.push_back({"buffers", buffers});
  // What no layer states: the loss and its sum, the logged losses, the collectives' and the
  // pipeline's small temporaries. Measured at most 32 KiB (2 stages of ResAttNet3D-34,
  // test/tools/check_memory_random.py); a bound.
  step.resident.push_back({"small tensors outside the layers (bound)", kSmallTensorsBound});
  // gridnn-predict's batch on the host, the fitted volumes of its scans, whole on every rank of
  // a row (and the batch's copy on a GPU). Reading a scan holds its stored voxels for a moment
  // too, which depends on the file: not counted.
  const int64_t scans_bytes = batch_bytes + rows * activation_bytes(batch.with(0, 1).with(2, o.input[0])) +
                              (on_cpu ? 0 : activation_bytes(batch));
  switch (job) {
    case MemoryJob::training: {
      step.resident.push_back({"optimizer state", optimizer_copies(o.optimizer) * optimized});
      // The loader's batch and the one it prefetches (host memory: on a GPU, the first stage's
      // copy of the batch on the device for the step instead).
      if (on_cpu)
        step.resident.push_back({"batch (current and prefetched)", 2 * batch_bytes});
      else if (span.first)
        step.device_batch_bytes = activation_bytes(batch);
      if (on_cpu && o.data.cache) {
        const int64_t per_sample = activation_bytes(batch.with(0, 1));  // one tensor each
        step.resident.push_back({"cached samples", per_sample * ((o.data.train_samples + grid.cols - 1) / grid.cols)});
      }
      const Shape at_micro = at_span(batch.with(0, micro));
      training_layers(o, net, span, at_micro, step);
      // Every micro-batch's input stays for its recomputation (a received one, or a copy of
      // the batch's rows; one micro-batch on the first stage is the batch itself).
      if (M > 1 || !span.first) step.micro_batch_stash = int64_t(M) * activation_bytes(at_micro);
      step.micro_batches = M;
      // Validation runs each of its batches' rows at once through the same blocks, reading
      // batches of its own (host memory) while the training loader holds its prefetched one.
      // The stage's input beside them: a later stage's received activation, and on a GPU
      // the first stage's device copy of the current batch.
      const ValidationRows v = validation_rows(o, shard_rows(grid, col, o.batch));
      if (v.one > 0) {
        const Shape in = at_span(batch.with(0, v.one));
        step.evaluation = evaluation_layers(net, span, in);
        if (on_cpu) step.evaluation_batch_bytes = batch_bytes_of(v.one) + batch_bytes_of(v.two - v.one);
        if (!span.first || !on_cpu) step.evaluation_batch_bytes += activation_bytes(in);
      }
      break;
    }
    case MemoryJob::prediction:
      step.resident.push_back({"batch and its scans", scans_bytes});
      step.evaluation = evaluation_layers(net, span, at);
      break;
    case MemoryJob::explanation: {
      step.resident.push_back({"batch and its scans", scans_bytes});
      // explain::explain_batch: the network's input it builds (per transform; on a GPU, its
      // copy there), and on the host the batch's whole volumes, their heat sums and the count
      // of each voxel's views, through the step; once the step's activations are gone
      // (Grad-CAM lets go of what the blocks below its lowest layer kept), the heatmaps it
      // returns and at most four volumes of a moment (counted, fused, upsampled, normalized).
      step.resident.push_back({"explanation's input", activation_bytes(batch)});
      if (on_cpu) {
        const int64_t volume = o.input[0] * o.input[1] * o.input[2] * int64_t(sizeof(float));
        step.resident.push_back(
            {"explanation's volumes, sums and counts", 2 * nn::stored_bytes(rows * volume) + nn::stored_bytes(volume)});
        step.after_step_bytes = nn::stored_bytes(rows * volume) + 4 * nn::stored_bytes(volume);
      }
      RunOptions plain = o;
      plain.recompute = Recompute::none;
      training_layers(plain, net, span, at, step);
      break;
    }
  }
  // The CPU's per-thread buffers, or a GPU's one cuDNN workspace buffer (in the last slot:
  // the largest budget is held); the stand-in runs the CPU's kernels on host buffers the
  // device's allocator does not count.
  if (!on_cpu)
    for (auto* layers : {&step.layers, &step.evaluation})
      for (plan::LayerMemory& l : *layers) {
        l.workspace = {};
        if (!o.device.is_standin()) l.workspace.back() = l.device_workspace;
      }
  return step;
}

std::vector<plan::MemoryPeak> predict_grid_memory(const RunOptions& o, const parallel::GridShape& grid, MemoryJob job) {
  const parallel::GridShape one_stage{1, grid.rows, grid.cols};
  std::vector<plan::MemoryPeak> peaks;
  for (int r = 0; r < grid.rows; ++r) {
    const PlannedModel planned = planned_model(o, grid, r);
    const StageSpan whole{0, blocks_of(*planned.model).block_count(), true, true};
    for (int c = 0; c < grid.cols; ++c)
      peaks.push_back(plan::simulate_memory(memory_step(o, *planned.model, one_stage, r, c, whole, job)));
  }
  return peaks;
}

int64_t largest_peak(const std::vector<plan::MemoryPeak>& peaks) {
  int64_t most = 0;
  for (const plan::MemoryPeak& p : peaks) most = std::max(most, p.peak_bytes);
  return most;
}

int64_t measured_peak_bytes(const Device& device) { return int64_t(allocator_for(device).stats().peak_in_use); }

std::string memory_report_title(const Device& device) {
  return "memory per rank (predicted by the layers, measured by the allocator of " + device.str() +
         "; docs/design.md §6a):\n";
}

std::string memory_report(int rank, const plan::MemoryPeak& predicted, int64_t measured) {
  char line[256];
  const double error = measured > 0 ? 100.0 * double(predicted.peak_bytes - measured) / double(measured) : 0.0;
  std::snprintf(line, sizeof line, "rank %d: predicted peak %s, measured %s (%+.1f%%)%s%s\n", rank,
                format_bytes(predicted.peak_bytes).c_str(), format_bytes(measured).c_str(), error,
                predicted.at.empty() ? "" : "; at the ", predicted.at.c_str());
  std::string text = line;
  if (!predicted.at.empty()) {
    std::snprintf(line, sizeof line, "  resident %s, activations and scratch %s at the peak\n",
                  format_bytes(predicted.resident_bytes).c_str(), format_bytes(predicted.activation_bytes).c_str());
    text += line;
    // Each phase that holds activations (a prediction has no training step).
    std::string phases;
    for (const auto& [what, phase] : {std::pair{"training step ", &predicted.training}, {"", &predicted.evaluation}}) {
      if (phase->at.empty() || phase->activation_bytes == 0) continue;
      std::snprintf(line, sizeof line, "%s%s%s at the %s", phases.empty() ? "" : "; ", what,
                    format_bytes(phase->activation_bytes).c_str(), phase->at.c_str());
      phases += line;
    }
    if (!phases.empty()) text += "  activations: " + phases + "\n";
  }
  const size_t shown = std::min<size_t>(5, predicted.shares.size());
  for (size_t i = 0; i < shown; ++i) {
    const plan::MemoryShare& s = predicted.shares[i];
    std::snprintf(line, sizeof line, "  %-40s %12s  %5.1f%%\n", s.what.c_str(), format_bytes(s.bytes).c_str(),
                  100.0 * double(s.bytes) / double(std::max<int64_t>(predicted.peak_bytes, 1)));
    text += line;
  }
  return text;
}

std::vector<int64_t> per_rank(parallel::ProcessGrid& grid, int64_t value) {
  const int n = grid.world().size();
  std::vector<int64_t> slots(size_t(n), 0);
  slots[size_t(grid.world_rank())] = value;
  Tensor t = Tensor::from_vector(slots, Shape{n});
  parallel::CommLayerScope scope("memory");
  grid.world().all_reduce(t);
  return t.to_vector<int64_t>();
}

std::vector<std::string> per_rank(parallel::ProcessGrid& grid, const std::string& text) {
  const std::vector<int64_t> lengths = per_rank(grid, int64_t(text.size()));
  int64_t total = 0, offset = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    if (int(r) == grid.world_rank()) offset = total;
    total += lengths[r];
  }
  std::vector<int32_t> chars(size_t(total), 0);  // each rank's text in its place, summed
  for (size_t i = 0; i < text.size(); ++i) chars[size_t(offset) + i] = static_cast<unsigned char>(text[i]);
  Tensor t = Tensor::from_vector(chars, Shape{total});
  if (total > 0) {
    parallel::CommLayerScope scope("memory");
    grid.world().all_reduce(t);
  }
  const std::vector<int32_t> all = t.to_vector<int32_t>();
  std::vector<std::string> texts;
  int64_t at = 0;
  for (int64_t n : lengths) {
    std::string s;
    for (int64_t i = 0; i < n; ++i) s += char(all[size_t(at + i)]);
    texts.push_back(std::move(s));
    at += n;
  }
  return texts;
}

}  // namespace gridnn::run
