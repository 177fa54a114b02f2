// The memory model's replay (plan/memory_model.h) on steps whose peak is counted by hand.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/memory_model.h"

namespace gridnn::plan {
namespace {

LayerMemory layer(const std::string& name, int64_t output, bool keeps_input, int64_t input_grad) {
  LayerMemory m;
  m.layer = name;
  m.output = output;
  m.keeps_input = keeps_input;
  m.input_grad = input_grad;
  return m;
}

LayerMemory op(LayerMemory::Op kind, int64_t output = 0) {
  LayerMemory m;
  m.op = kind;
  m.layer = "block";
  m.output = output;
  return m;
}

// Two layers a (100 -> 200, keeps its input) and b (200 -> 50, keeps its input), then the
// loss's gradient of 50. The peak is at b's backward: resident 1000, a's input is the batch's
// (counted in the resident part), a's output 200 (kept by b), b's output 50 (the caller's),
// dy 50 and b's dx 200: 1000 + 200 + 50 + 50 + 200 = 1500.
TEST(MemoryModel, ChainPeakIsCountedByHand) {
  MemoryStep s;
  s.resident = {{"parameters and gradients", 1000}};
  s.layers = {layer("a", 200, true, 100), layer("b", 50, true, 200)};
  s.loss_grad_bytes = 50;
  const MemoryPeak p = simulate_memory(s);
  EXPECT_EQ(p.peak_bytes, 1500);
  EXPECT_EQ(p.resident_bytes, 1000);
  EXPECT_EQ(p.at, "backward of b");
  ASSERT_FALSE(p.shares.empty());
  EXPECT_EQ(p.shares[0].what, "parameters and gradients");
}

// The same chain with b's dx written over its dy (LayerMemory::grad_in_place, a batch norm given
// its gradient): the peak is reached when the loss makes its gradient, a's output 200 (kept
// by b), b's output 50 (the caller's) and the gradient 50: 1000 + 300. b's backward adds
// nothing to it (the gradient becomes b's dx), where ChainPeakIsCountedByHand adds b's dx of
// 200. The training step's activation peak is reported apart from the resident part.
TEST(MemoryModel, AGradientWrittenInPlaceAllocatesNothing) {
  MemoryStep s;
  s.resident = {{"parameters and gradients", 1000}};
  s.layers = {layer("a", 200, true, 100), layer("b", 50, true, 200)};
  s.layers[1].grad_in_place = true;
  s.loss_grad_bytes = 50;
  const MemoryPeak p = simulate_memory(s);
  EXPECT_EQ(p.peak_bytes, 1300);
  EXPECT_EQ(p.at, "the loss");
  EXPECT_EQ(p.training.activation_bytes, 300);
  EXPECT_EQ(p.training.at, "the loss");
  EXPECT_TRUE(p.evaluation.at.empty());
}

// Scratch counts only for the moment of its pass; kept bytes until the layer's backward.
TEST(MemoryModel, ScratchAndKeptBytes) {
  MemoryStep s;
  LayerMemory a = layer("a", 10, false, 0);
  a.forward_scratch = 1000;
  LayerMemory b = layer("b", 10, false, 10);
  b.kept = 300;
  b.backward_scratch = 5;
  s.layers = {a, b};
  // a's forward: a's output 10 + scratch 1000 (the input is the batch's).
  EXPECT_EQ(simulate_memory(s).peak_bytes, 1010);
  s.layers[0].forward_scratch = 0;
  // b's backward: b's output 10 (the caller's), kept 300, dx 10 and scratch 5 = 325.
  EXPECT_EQ(simulate_memory(s).peak_bytes, 325);
}

// A residual block: fork, main path (one layer), branch (identity), join (the sum), as
// BasicBlock states it. Forward: x (the batch's, 0 here), main output 40 kept by nobody after
// the join; the sum 40. Backward: the join hands g (40) to both paths; the main layer's dx 40
// while g is held; the fork's sum 40 while both exist: 40 (output held by the caller) + 40
// (g) + 40 (dx) + 40 (sum) = 160.
TEST(MemoryModel, ResidualBlockHoldsTheGradientForBothPaths) {
  MemoryStep s;
  s.layers = {op(LayerMemory::Op::fork), layer("main", 40, false, 40), op(LayerMemory::Op::branch),
              op(LayerMemory::Op::join, 40)};
  s.loss_grad_bytes = 40;
  const MemoryPeak p = simulate_memory(s);
  EXPECT_EQ(p.peak_bytes, 160);
  EXPECT_EQ(p.at, "backward of block");
}

// Workspaces only grow: per buffer the largest any layer asks for, summed over the buffers.
TEST(MemoryModel, WorkspaceIsTheLargestPerBuffer) {
  MemoryStep s;
  LayerMemory a = layer("a", 0, false, 0), b = layer("b", 0, false, 0);
  a.workspace = {100, 5, 0, 0, 7};
  b.workspace = {50, 20, 0, 0, 9};
  s.layers = {a, b};
  const MemoryPeak p = simulate_memory(s);
  EXPECT_EQ(p.workspace_bytes, 100 + 20 + 9);
  EXPECT_EQ(p.peak_bytes, 129);
}

// GPipe's micro-batches: the next forward runs while the earlier one's kept tensors are held
// by the layers it has not reached. a (output 200, keeps its input) and b (output 50, keeps its
// input and 30 more). The earlier forward leaves a's output (b's input) and b's 30: 230. The
// next forward's a makes its 200 beside them: 430 (a holds only the batch's input, 0 here).
// b then lets go of the earlier input before it allocates (a layer replaces what it keeps
// first), and of the earlier 30 once its own exist: 280, and the loss's 50 makes 330. One
// micro-batch peaks there, at the loss.
TEST(MemoryModel, TheNextMicroBatchRunsBesideWhatTheEarlierOneKept) {
  MemoryStep s;
  s.resident = {{"parameters and gradients", 1000}};
  LayerMemory b = layer("b", 50, true, 0);
  b.kept = 30;
  s.layers = {layer("a", 200, true, 0), b};
  s.loss_grad_bytes = 50;
  const MemoryPeak one = simulate_memory(s);
  EXPECT_EQ(one.peak_bytes, 1330);
  EXPECT_EQ(one.at, "the loss");
  s.micro_batches = 2;
  const MemoryPeak two = simulate_memory(s);
  EXPECT_EQ(two.peak_bytes, 1430);
  EXPECT_EQ(two.at, "next micro-batch: forward of a");
  // A recomputed block keeps only its input, here the output of a layer z before it (300):
  // the earlier micro-batch leaves that, and the next one's block replaces it as it begins.
  // One micro-batch peaks at the block's recomputed forward before b's backward: z's output
  // 300, the loss's 50 (b's output, the caller's, and dL/dy) and the block replayed, 200 + 80
  // (a's output and b's 30; a keeps z's output, held already): 1000 + 300 + 100 + 280. Two
  // peak as one; holding the earlier input into the next block would reach 1000 + 600 + 280.
  s.layers = {layer("z", 300, false, 0), op(LayerMemory::Op::recompute_begin), layer("a", 200, true, 0), b,
              op(LayerMemory::Op::recompute_end)};
  s.micro_batches = 1;
  EXPECT_EQ(simulate_memory(s).peak_bytes, 1680);
  s.micro_batches = 2;
  EXPECT_EQ(simulate_memory(s).peak_bytes, 1680);
}

// A GPU's copy of the batch lives through the training step; validation holds its own batch
// (MemoryStep::evaluation_batch_bytes) instead.
TEST(MemoryModel, TheBatchOnTheDeviceIsHeldThroughTheTrainingStepAlone) {
  MemoryStep s;
  s.resident = {{"parameters and gradients", 1000}};
  s.device_batch_bytes = 400;
  s.layers = {layer("a", 100, true, 0)};
  s.evaluation = {layer("e", 500, false, 0)};
  s.evaluation_batch_bytes = 100;
  auto has_device_batch = [](const MemoryPeak& p) {
    for (const MemoryShare& share : p.shares)
      if (share.what == "batch (on the device)") return true;
    return false;
  };
  MemoryPeak p = simulate_memory(s);
  EXPECT_EQ(p.peak_bytes, 1000 + 100 + 500);  // the evaluation's
  EXPECT_EQ(p.resident_bytes, 1100);
  EXPECT_FALSE(has_device_batch(p));
  s.evaluation[0].output = 50;
  p = simulate_memory(s);
  EXPECT_EQ(p.peak_bytes, 1000 + 400 + 100);  // the training step's
  EXPECT_EQ(p.resident_bytes, 1400);
  EXPECT_TRUE(has_device_batch(p));
}

// What is held once the step's activations are gone (MemoryStep::after_step_bytes: an
// explanation's heatmaps) is a moment of its own: the peak when it outweighs the step's.
TEST(MemoryModel, WhatIsHeldAfterTheStepIsAMomentOfItsOwn) {
  MemoryStep s;
  s.resident = {{"parameters and gradients", 1000}};
  s.layers = {layer("a", 100, true, 0)};
  s.after_step_bytes = 50;
  EXPECT_EQ(simulate_memory(s).peak_bytes, 1100);  // the step's: a's output
  s.after_step_bytes = 300;
  const MemoryPeak p = simulate_memory(s);
  EXPECT_EQ(p.peak_bytes, 1300);
  EXPECT_EQ(p.at, "end of the step");
  EXPECT_EQ(p.resident_bytes, 1000);
  EXPECT_EQ(p.training.activation_bytes, 100);
  // Setup, when it holds more, is the peak still.
  s.setup_bytes = 1400;
  EXPECT_EQ(simulate_memory(s).peak_bytes, 1400);
  EXPECT_EQ(simulate_memory(s).at, "setup");
}

TEST(MemoryModel, UnbalancedStructureIsAnError) {
  MemoryStep s;
  s.layers = {op(LayerMemory::Op::fork)};
  EXPECT_THROW(simulate_memory(s), Error);
  s.layers = {op(LayerMemory::Op::join, 4)};
  EXPECT_THROW(simulate_memory(s), Error);
}

}  // namespace
}  // namespace gridnn::plan
