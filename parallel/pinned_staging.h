// Pinned host staging for device tensors that go through a host-memory transport (the MPI
// backend, docs/design.md §4: ranks sharing a GPU, or no NCCL).
//
// MPI reads and writes host bytes. A host tensor lends its own storage; a device tensor is
// copied into a page-locked (cudaHostAlloc) buffer with cudaMemcpyAsync on its device's
// compute stream, then that stream is synchronized, so the copy runs at full PCIe speed and
// is ordered after the kernels that produced the tensor. The buffers belong to a PinnedPool
// (one per communicator): a call leases what it needs, and the lease returns the buffer to
// the pool, which hands it out again; a buffer too small for a request is freed and
// allocated again larger (grown on demand), so after the first step no cudaHostAlloc
// happens. The pool frees every buffer in its destructor; leases must end before it.
//
//   PinnedPool pool;
//   StagedTensor staged(pool, t, /*fill=*/true);   // t's bytes, on the host
//   MPI_Allreduce(MPI_IN_PLACE, staged.data(), ...);
//   staged.store(t);                                // back into t (no-op for a host t)
//
// Without CUDA there are no device tensors: host tensors behave as above, and a PinnedPool
// never allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace gridnn::parallel {

class PinnedPool {
 public:
  PinnedPool() = default;
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A pinned buffer of at least `bytes` bytes, owned by the pool, lent until the Lease ends.
  class Lease {
   public:
    Lease() = default;
    ~Lease() { release(); }
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    void* data() const;
    size_t bytes() const;

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, size_t slot) : pool_(pool), slot_(slot) {}
    void release();
    PinnedPool* pool_ = nullptr;
    size_t slot_ = 0;
  };

  // For tensors of `device` (pinned memory serves every GPU; the device stand-in's buffers are
  // plain host memory, core/device.h). Throws gridnn::Error in a build without CUDA for a
  // real CUDA device (no device tensor ever needs staging there).
  Lease acquire(size_t bytes, const Device& device = Device::cuda(0));

  // For tests and reports.
  size_t buffers() const { return buffers_.size(); }
  size_t reserved_bytes() const;
  int64_t host_allocations() const { return host_allocations_; }  // cudaHostAlloc calls so far

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    bool leased = false;
    bool plain = false;  // plain host memory (the stand-in's), not cudaHostAlloc's
  };
  std::vector<Buffer> buffers_;
  int64_t host_allocations_ = 0;
};

// The host bytes a transport uses for tensor `t` (contiguous, as every gridnn tensor): t's own
// storage when t is on the host; for a device tensor, a pinned buffer leased from `pool`,
// holding a copy of t when `fill` is true (an input), left unset otherwise (an output).
class StagedTensor {
 public:
  StagedTensor() = default;
  StagedTensor(PinnedPool& pool, const Tensor& t, bool fill);
  void* data() const { return data_; }
  bool staged() const { return staged_; }  // true when t is a device tensor
  // Copies the staged bytes into `t` (the tensor given to the constructor); nothing to do
  // for a host tensor, whose storage the transport wrote directly.
  void store(Tensor& t) const;

 private:
  void* data_ = nullptr;
  bool staged_ = false;
  PinnedPool::Lease lease_;
};

// Device → pinned host and back on `device`'s compute stream, then a synchronization of that
// stream: when they return, the host may read `host` (download) or reuse it (upload).
// CUDA builds only (they throw gridnn::Error otherwise).
void download_to_pinned(const Tensor& device_tensor, void* host);
void upload_from_pinned(const void* host, Tensor& device_tensor);

}  // namespace gridnn::parallel
