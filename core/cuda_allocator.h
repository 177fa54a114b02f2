// Caching allocator for CUDA device memory (CUDA builds only).
//
// Requests are rounded up (512 B below 1 MiB, 2 MiB above) and served from a per-device
// pool of freed blocks, best fit first; cudaMalloc is called only when no cached block
// fits. On cudaErrorMemoryAllocation the cache is released and the call retried once.
// Blocks are reused in stream order: all kernels of a device run on its compute stream
// (core/cuda_context.h), so a block freed on the host can be handed out again at once.
#pragma once

#include "core/allocator.h"

namespace gridnn {

Allocator& cuda_caching_allocator(int device);

}  // namespace gridnn
