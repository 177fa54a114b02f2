// Host <-> device copies, counted where they happen (docs/design.md §2): a training step on a
// GPU moves only its batch up and, at logging steps, its metrics down; these counters let
// tests and `gridnn-train --comm-report` check that nothing else crosses the bus.
//
//   reset_transfer_counts();
//   step.forward_backward(...);
//   const TransferCounts c = transfer_counts();   // c.downloads == 0 inside a step
//
// Counted:
//   uploads / downloads     every host -> device / device -> host copy of copy_bytes
//                           (core/memory.h): Tensor::to, to_host, to_vector, copy_from
//   staged_uploads / ...    the communicators' copies of device tensors into and out of pinned
//                           host buffers (the MPI backend's staging, parallel/pinned_staging.h)
//   host_reads              calls of Tensor::to_host (to_vector included) on a tensor of ANY
//                           device: on a CPU-only build this counts the reads that would be
//                           downloads on a GPU, so the CPU tests can check the step path too
// Process-wide and thread-safe (relaxed atomics: counts, not an ordering).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace gridnn {

struct TransferCounts {
  int64_t uploads = 0, downloads = 0;
  int64_t upload_bytes = 0, download_bytes = 0;
  int64_t staged_uploads = 0, staged_downloads = 0;
  int64_t staged_bytes = 0;
  int64_t host_reads = 0;

  // this - earlier: what happened in between.
  TransferCounts since(const TransferCounts& earlier) const;
  TransferCounts& operator+=(const TransferCounts& other);
  // One line: "12 uploads (3.1 MB), 0 downloads (0 B), staged 4 up / 4 down (1.2 MB), 2 host reads".
  std::string str() const;
};

TransferCounts transfer_counts();
void reset_transfer_counts();

// Called by the copy paths (core/memory.cpp, parallel/pinned_staging.cpp, Tensor::to_host).
void count_copy(const Device& dst, const Device& src, size_t bytes);
void count_staged_copy(bool to_device, size_t bytes);
void count_host_read();

}  // namespace gridnn
