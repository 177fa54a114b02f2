// The per-thread workspace buffers of the CPU convolutions (kernels/cpu/conv3d_onednn.h): one
// size per buffer, by the role of what it holds. Each buffer only grows, so it holds the largest
// size any convolution pass asked of it. The per-rank memory model (plan/memory_model.h) adds
// them up.
#pragma once

#include <array>
#include <cstdint>

#include "core/size_class.h"

namespace gridnn::kernels {

constexpr int kWorkspaceSlots = 5;  // source, weights, destination, bias, scratchpad
using Workspace = std::array<int64_t, kWorkspaceSlots>;

// The bytes the host allocator holds for a buffer of `floats` floats (its size class): what
// the CPU kernels state for each buffer they allocate.
inline int64_t host_floats_bytes(int64_t floats) {
  return int64_t(block_bytes(Device::cpu(), size_t(floats) * sizeof(float)));
}

}  // namespace gridnn::kernels
