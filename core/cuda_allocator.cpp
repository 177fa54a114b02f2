// Caching allocator for CUDA device memory (policy in core/cuda_allocator.h).
//
// Blocks: every block comes from one cudaMalloc of its size class (core/size_class.h: 512 B
// granularity up to 1 MiB, 2 MiB above) and is handed out whole. Blocks are never split or
// merged (simple and obviously correct), and a cached block serves requests of its own class
// only, so the bytes in use are the sum of the classes of the live requests, as the memory
// model predicts them (docs/design.md §6a).
//
// free_ holds the cached blocks ordered by size; live_ maps each handed-out pointer to its
// block size. Stats: in_use and peak_in_use count block bytes held
// by callers, reserved counts block bytes obtained from cudaMalloc and not yet cudaFree'd
// (in_use + cached), system_allocations counts cudaMalloc calls.
//
// Stream order: a freed block goes back to the cache at once. This is safe because every
// kernel of the device runs on its one compute stream (core/cuda_context.h): work that will
// use the block again is queued after the work that used it. Code that touches memory on
// another stream must order that stream against the compute stream with events before it
// releases the tensor. release_cached() synchronizes the device before cudaFree. Out of
// memory, the allocator first takes any cached block large enough (its spare bytes then count
// as in use), then releases the cache and retries, unless a StartedCollective is held for the
// device (core/cuda_allocator.h says why).
//
// GRIDNN_CUDA_ALLOCATOR=exact (an operational variable, read when the allocator is made): no
// cache and no rounding, for compute-sanitizer's memcheck: each request is a cudaMalloc of
// exactly its bytes and each release a cudaFree, so an access past a tensor's end or into a
// released tensor is caught (inside a rounded or cached block memcheck sees nothing wrong).
// The stats still count size classes, so limits and --memory-report read as in a normal run.
// cudaFree synchronizes the device, so it is for runs of one process, where no started
// all-reduce waits on a peer (the reason release_cached() is held back above).
//
// One allocator per device, created on first use, never destroyed (tensors may outlive main).
#include "core/cuda_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/cuda_check.h"
#include "core/size_class.h"
#include "core/stream.h"

namespace gridnn {
namespace {

// StartedCollective counts, per device (at most kMaxDevices).
constexpr int kMaxDevices = 64;
std::atomic<int> started_collectives[kMaxDevices];

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

// GRIDNN_CUDA_ALLOCATOR: "exact" (above), or unset / "caching"; anything else is refused.
bool exact_from_environment() {
  const char* v = std::getenv("GRIDNN_CUDA_ALLOCATOR");
  const std::string mode = v ? v : "";
  GRIDNN_REQUIRE(mode.empty() || mode == "caching" || mode == "exact", "GRIDNN_CUDA_ALLOCATOR=", mode,
                 ": give caching (the default) or exact (no cache or rounding, for compute-sanitizer)");
  return mode == "exact";
}

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device), exact_(exact_from_environment()) {}

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t size = size_class(SizeClasses::cuda, bytes, host_page_size());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    if (limit_ > 0 && stats_.in_use + size > limit_) throw memory_limit_error(device(), bytes, stats_.in_use, limit_);
    void* p = exact_ ? nullptr : take_cached(size, size);
    if (!p) p = system_allocate(bytes, size);
    const size_t block = live_.at(p);
    stats_.in_use += block;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return p;
  }

  void deallocate(void* ptr, size_t /*bytes*/) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {  // a bug in the caller; called from destructors, so no throw
      std::fprintf(stderr, "gridnn: cuda:%d allocator: freeing unknown pointer %p\n", device_, ptr);
      std::abort();
    }
    const size_t block = it->second;
    live_.erase(it);
    stats_.in_use -= block;
    if (exact_) {
      cuda::DeviceGuard guard(device_);
      GRIDNN_CHECK_CUDA(cudaFree(ptr));  // after the work queued on it: cudaFree synchronizes
      stats_.reserved -= block;
      return;
    }
    free_.emplace(block, ptr);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  Device device() const override { return Device::cuda(device_); }

  void set_limit(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
  }

  void release_cached() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }

 private:
  // The smallest cached block that fits `size` and is at most `largest` bytes.
  void* take_cached(size_t size, size_t largest) {
    auto it = free_.lower_bound(size);
    if (it == free_.end() || it->first > largest) return nullptr;
    void* p = it->second;
    live_[p] = it->first;
    free_.erase(it);
    return p;
  }

  // A new block (cudaMalloc), entered in live_; out of memory, a larger cached block, else one
  // retry after releasing the cache when no all-reduce is in flight.
  void* system_allocate(size_t requested, size_t size) {
    cuda::DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, exact_ ? requested : size);
    bool held_back = false;
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the (non-sticky) error before going on
      if (void* cached = take_cached(size, SIZE_MAX)) return cached;
      held_back = !free_.empty() && started_collectives[device_].load() > 0;
      if (!free_.empty() && !held_back) {
        release_locked();
        status = cudaMalloc(&p, exact_ ? requested : size);
      }
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
      const size_t cached = stats_.reserved - stats_.in_use;
      throw Error("out of memory on cuda:" + std::to_string(device_) + ": could not allocate " +
                  std::to_string(requested) + " bytes (" + mib(size) + " block); tensors use " + mib(stats_.in_use) +
                  ", gridnn holds " + mib(stats_.reserved) + " in all, the device has " + mib(free_bytes) +
                  " free of " + mib(total_bytes) +
                  (held_back ? ". The " + mib(cached) +
                                   " gridnn caches were not released: an "
                                   "all-reduce started on this device has not been waited for, and "
                                   "releasing waits for the whole device"
                             : std::string()) +
                  ". Reduce the batch size (or the model or input size), or spread the work "
                  "over more GPUs with a larger grid");
    }
    GRIDNN_CHECK_CUDA(status);
    ++stats_.system_allocations;
    stats_.reserved += size;
    live_[p] = size;
    return p;
  }

  // cudaFree every cached block, after the device has finished any work that used them.
  void release_locked() {
    if (free_.empty()) return;
    cuda::DeviceGuard guard(device_);
    GRIDNN_CHECK_CUDA(cudaDeviceSynchronize());
    for (auto it = free_.begin(); it != free_.end(); it = free_.erase(it)) {
      GRIDNN_CHECK_CUDA(cudaFree(it->second));
      stats_.reserved -= it->first;
    }
  }

  const int device_;
  const bool exact_;  // GRIDNN_CUDA_ALLOCATOR=exact
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;       // cached blocks by size
  std::unordered_map<void*, size_t> live_;  // handed-out blocks and their sizes
  AllocatorStats stats_;
  size_t limit_ = 0;  // bytes in use at most; 0: no limit
};

}  // namespace

StartedCollective::StartedCollective(int device) : device_(device) {
  GRIDNN_REQUIRE(device >= 0 && device < kMaxDevices, "StartedCollective: device ", device, " out of range");
  started_collectives[device_].fetch_add(1);
}
StartedCollective::~StartedCollective() { started_collectives[device_].fetch_sub(1); }

Allocator& cuda_caching_allocator(int device) {
  require_device(Device::cuda(device));
  static const int count = cuda_device_count();
  static CudaCachingAllocator** allocators = [] {
    auto** a = new CudaCachingAllocator*[size_t(count)];
    for (int i = 0; i < count; ++i) a[i] = new CudaCachingAllocator(i);
    return a;
  }();
  return *allocators[device];
}

}  // namespace gridnn
