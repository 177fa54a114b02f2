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

TEST(MemoryModel, UnbalancedStructureIsAnError) {
  MemoryStep s;
  s.layers = {op(LayerMemory::Op::fork)};
  EXPECT_THROW(simulate_memory(s), Error);
  s.layers = {op(LayerMemory::Op::join, 4)};
  EXPECT_THROW(simulate_memory(s), Error);
}

}  // namespace
}  // namespace gridnn::plan
