// The per-thread workspace buffers of the CPU convolutions (kernels/cpu/conv3d_onednn.h): one
// size per buffer, by the role of what it holds. Each buffer only grows, so it holds the largest
// size any convolution pass asked of it. The per-rank memory model (plan/memory_model.h) adds
// them up.
#pragma once

#include <array>
#include <cstdint>

namespace gridnn::kernels {

constexpr int kWorkspaceSlots = 5;  // source, weights, destination, bias, scratchpad
using Workspace = std::array<int64_t, kWorkspaceSlots>;

}  // namespace gridnn::kernels
