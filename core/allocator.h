// Allocators: where tensor storage comes from.
//
// Every allocator rounds a request up to its size class (core/size_class.h) and counts that
// many bytes in use: the bytes in use are the sum of the classes of the live requests.
// host_allocator(): 64-byte aligned host memory (core/host_allocator.cpp). Blocks of 256 KiB
// and more are cached: freed ones stay mapped and are handed out again for requests of
// their class, so after the first training step large tensors cost no mmap, page fault or
// zero-filling; smaller requests go to aligned_alloc/free. Thread-safe.
// cuda_allocator(i): a caching allocator for device i (core/cuda_allocator.cpp). Freed
// blocks stay reserved and are handed out again, so after the first training step no
// cudaMalloc happens; stats() shows how much is in use, reserved and the peak.
// allocator_for(d): the one new storage on d comes from; a test may put another allocator in
// front of it (set_front_allocator: the op harness's guard regions, test/ops/guarded_memory.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/error.h"

namespace gridnn {

struct AllocatorStats {
  size_t in_use = 0;                // bytes handed out and not yet returned (their size classes)
  size_t reserved = 0;              // bytes obtained from the system / driver and still held
  size_t peak_in_use = 0;           // high-water mark of in_use
  uint64_t allocations = 0;         // calls to allocate()
  uint64_t system_allocations = 0;  // allocations that reached the system (aligned_alloc,
                                    // mmap, cudaMalloc)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` bytes (nullptr for 0 bytes); throws on failure.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual Device device() const = 0;
  // Returns cached, unused memory to the system (no-op for allocators that cache nothing).
  virtual void release_cached() {}
  // Caps the bytes in use (0: no cap, the default): a request that would take in_use past
  // `bytes` throws the error of memory_limit_error instead (gridnn-train --memory-limit).
  virtual void set_limit(size_t bytes) = 0;
};

// The error of a request of `requested` bytes on `device` that the limit refuses, naming the
// allocation scope of the calling thread.
Error memory_limit_error(const Device& device, size_t requested, size_t in_use, size_t limit);

// Names what the calling thread is doing, `action` then `name` ("the backward of " and
// "layer1.0.conv1"), for the memory limit's error, for the scope's lifetime (the previous name
// after). It keeps the two by reference, joined only for an error (it is set around every
// layer's backward): both must outlive the scope.
class AllocationScope {
 public:
  AllocationScope(const char* action, const std::string& name);
  ~AllocationScope();
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;
  static std::string current();  // "" outside every scope

 private:
  const char* previous_action_;
  const std::string* previous_name_;
};

Allocator& host_allocator();
Allocator& allocator_for(const Device& d);
// Puts `front` before d's allocator, so that allocator_for(d) returns it (nullptr takes it
// away again). Storage returns its block to the allocator it came from, so a front must
// outlive its blocks. For tests; set it while no other thread allocates on d.
void set_front_allocator(const Device& d, Allocator* front);

}  // namespace gridnn
