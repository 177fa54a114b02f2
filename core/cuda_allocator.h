// Caching allocator for CUDA device memory (CUDA builds only).
//
// Requests are rounded up to their size class (core/size_class.h: 512 B up to 1 MiB, 2 MiB
// above) and served from a per-device pool of freed blocks of that class; cudaMalloc is
// called only when none is cached. On cudaErrorMemoryAllocation a larger cached block is taken if there is one, else
// the cache is released and the call retried once, unless an all-reduce started on the
// device has not been waited for: releasing (cudaFree) waits for the whole device, and such
// an all-reduce may need a peer that first needs this rank's later work (docs/design.md §4).
// Blocks are reused in stream order: all kernels of a device run on its compute stream
// (core/cuda_context.h), so a block freed on the host can be handed out again at once.
#pragma once

#include "core/allocator.h"

namespace gridnn {

Allocator& cuda_caching_allocator(int device);

// Counts the all-reduces started on `device` and not yet waited for (the NCCL backend,
// parallel/nccl_communicator.cpp, holds one for each); while any is held, the allocator never
// synchronizes the device.
class StartedCollective {
 public:
  explicit StartedCollective(int device);
  ~StartedCollective();
  StartedCollective(const StartedCollective&) = delete;
  StartedCollective& operator=(const StartedCollective&) = delete;

 private:
  int device_;
};

}  // namespace gridnn
