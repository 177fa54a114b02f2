// The per-rank memory model (docs/design.md §6a): what one rank's allocator holds at the worst
// moment of a training step, predicted from what each layer states about itself.
//
// Each module states, beside its forward and backward (nn::Module::describe), the tensors its
// forward allocates and keeps for backward, the scratch it needs for a moment, and the input
// gradient its backward allocates (LayerMemory, in bytes, as this rank runs the layer). The
// step adds what lives across steps (parameters, gradients, optimizer state, the batch and
// the loader's prefetched batch, per-thread convolution workspaces).
// simulate_memory replays the step: every layer's forward in order, then every backward in
// reverse, each tensor counted once however many hold it, each freed when its last holder
// lets go (a layer's saved tensors when its backward ends). The peak of bytes in use is what
// the allocators' high-water mark measures (AllocatorStats::peak_in_use).
//
// A container that is not a chain states its structure with three ops around its children's
// records: fork (its input is also held for later: a residual block's shortcut), branch (the
// held tensor becomes the current one and the current one is held: the shortcut's own layers
// run next) and join (a new tensor from the current and the held one: the residual add). In
// backward they run in reverse: join hands the gradient to both paths, branch swaps them
// back, fork adds the two input gradients into a new tensor.
//
// A block that is recomputed (--recompute blocks) is framed by recompute_begin and
// recompute_end: its forward keeps its input and frees everything its layers kept once it
// ends; in backward its layers' forward is replayed again from that input just before their
// backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/conv3d_workspace.h"

namespace gridnn::plan {

struct LayerMemory {
  enum class Op { layer, fork, branch, join, recompute_begin, recompute_end };
  Op op = Op::layer;
  std::string layer;             // state_dict name (the container's, for fork/branch/join)
  int64_t output = 0;            // bytes of the new output (0: the output is the input, or a view of it)
  bool keeps_input = false;      // its forward keeps its input until its backward ends
  bool keeps_output = false;     // ... its output
  int64_t kept = 0;              // other tensors its forward keeps until its backward ends
  int64_t forward_scratch = 0;   // most bytes its forward holds at once besides input, output and kept
  int64_t backward_scratch = 0;  // most bytes its backward holds at once besides dy, dx and kept
  int64_t input_grad = 0;        // bytes of dL/dinput its backward returns (0: none)
  int64_t state = 0;             // held for the layer's life besides parameters and buffers
  bool grad_in_place = false;    // ... written over dL/doutput, which its container gives up
  // A wrapper's own step before the layer it wraps (a halo, a gather): the wrapper's caller
  // still holds the wrapper's input until the wrapped layer's forward ends.
  bool wraps_next = false;
  // A container's last layer whose dL/doutput the container's backward holds until it ends
  // at the container's fork (a residual block's last ReLU: Module::backward holds the
  // block's dy while its layers run).
  bool dy_held_to_fork = false;
  // The workspace sizes its passes ask for on the CPU (kernels/conv3d_workspace.h).
  kernels::Workspace workspace{};
  // On a GPU, the most its passes may take of the device's one workspace buffer
  // (ops::cuda_conv_workspace_budget, in the CUDA allocator's class).
  int64_t device_workspace = 0;
};

// A named amount of memory that lives through the whole step.
struct MemoryItem {
  std::string what;  // "parameters", "optimizer state", "batch (current and prefetched)", ...
  int64_t bytes = 0;
};

// One training step on one rank.
struct MemoryStep {
  std::vector<MemoryItem> resident;  // lives across steps
  std::vector<LayerMemory> layers;   // the forward in order (nn::Module::describe)
  int64_t input_bytes = 0;           // the network's input (already counted in `resident`)
  int64_t loss_grad_bytes = 0;       // dL/doutput, which the loss allocates to start backward
  int64_t micro_batch_stash = 0;     // inputs kept for recomputed micro-batches (GPipe)
  // Micro-batches of the step (GPipe): each forward runs while the one before's kept tensors
  // are still held by the layers it has not reached yet. The last one's backward comes first,
  // then each earlier one is recomputed and run backward alone.
  int micro_batches = 1;
  int64_t device_batch_bytes = 0;  // the batch's copy on a GPU, made for the training step alone
  // The layers of an evaluation forward (validation: all the shard's rows at once, no
  // backward): replayed forward only, after the training step; empty: none.
  std::vector<LayerMemory> evaluation;
  // Alive during evaluation only: the validation loader's batches, and the stage's input (a
  // later stage's received activation; on a GPU the first stage's copy of the batch).
  int64_t evaluation_batch_bytes = 0;
  // Held for a moment once the step's activations are gone (gridnn-predict --explain: the
  // heatmaps and the fusing's volumes), beside what lives across steps; 0: nothing.
  int64_t after_step_bytes = 0;
  // Setup, before the first step: the network's tensors as built (each gradient on its own)
  // and a weights file being read, all of whose tensors exist at once (LayerMemory::state is
  // added); 0: not counted.
  int64_t setup_bytes = 0;
};

// A holder of bytes at the peak: a layer (its kept tensors, outputs, gradients or scratch)
// or a resident item.
struct MemoryShare {
  std::string what;
  int64_t bytes = 0;
};

// The activation peak of one phase of the step, above what lives across it.
struct PhasePeak {
  int64_t activation_bytes = 0;
  std::string at;
};

struct MemoryPeak {
  int64_t peak_bytes = 0;
  int64_t resident_bytes = 0;       // the part that lives across steps
  int64_t activation_bytes = 0;     // the rest at the peak: kept tensors, outputs, gradients, scratch
  int64_t workspace_bytes = 0;      // convolution workspace (part of resident_bytes)
  int64_t layer_state_bytes = 0;    // the layers' own state (LayerMemory::state; part of resident_bytes)
  std::string at;                   // "backward of layer1.0.conv1", ...
  std::vector<MemoryShare> shares;  // every holder at the peak, largest first
  PhasePeak training, evaluation;   // each phase's own peak (the larger one is the step's)
};

// Replays `step` (see the header comment) and returns its peak.
MemoryPeak simulate_memory(const MemoryStep& step);
// What a forward of `layers` holds when it ends, its input excluded: what they keep for their
// backward, and the output. (A pipeline block's stash per micro-batch, for GABRA.)
int64_t forward_held_bytes(const std::vector<LayerMemory>& layers);

}  // namespace gridnn::plan
