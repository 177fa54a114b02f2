// Host memory for tensors: a caching allocator for large blocks (policy in core/allocator.h).
//
// Every request is rounded up to its size class (core/size_class.h) and counted as that many
// bytes in use, so the bytes in use are the sum of the classes of the live requests, as the
// memory model predicts them (docs/design.md §6a).
//
// Large blocks (requests of at least 256 KiB): every block comes from one anonymous mmap of
// its class (a whole number of pages) and is handed out whole. A freed block stays cached
// (mapped and resident) and serves later requests of the same class, so a training step that
// repeats the sizes of the step before reaches the system for none of them: no mmap/munmap,
// no page faults, no zero-filling of fresh pages. Blocks are never split or merged, and a
// block never serves a smaller class (its spare bytes would count as in use, depending on
// which blocks happened to be free). Under a limit the cache gives way: before a new block
// would take the bytes held from the system past the limit, the cached blocks are unmapped.
//
// Small requests (under 256 KiB) go straight to aligned_alloc/free: the C library keeps its
// own free lists for them, and never maps or unmaps per call at these sizes.
//
// free_ holds the cached blocks ordered by size; live_ maps every handed-out pointer, small
// or large, to its class. Stats: in_use and peak_in_use count the classes callers hold,
// reserved counts what is taken from the system and not yet returned (in_use + cached
// blocks), system_allocations counts mmap and aligned_alloc calls.
//
// All memory is 64-byte aligned (large blocks are page aligned). Any thread may allocate and
// free: tensors are released on other threads (the data loader's prefetch thread). Under
// AddressSanitizer a cached block is poisoned, and a handed-out block is poisoned past the
// requested bytes, so reuse keeps overflows and use-after-free visible.
//
// One allocator per device, created on first use, never destroyed (tensors may outlive main).
// The device stand-in's counts by the CUDA classes.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/allocator.h"
#include "core/error.h"
#include "core/size_class.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_allocator.h"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define GRIDNN_HOST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRIDNN_HOST_ASAN 1
#endif
#endif
#if GRIDNN_HOST_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace gridnn {
namespace {

constexpr size_t kHostAlignment = 64;  // a cache line, and enough for any SIMD load
static_assert(kHostSmallGranule % kHostAlignment == 0, "aligned_alloc needs a multiple of the alignment");

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

void poison(void* p, size_t bytes) {
#if GRIDNN_HOST_ASAN
  ASAN_POISON_MEMORY_REGION(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}

void unpoison(void* p, size_t bytes) {
#if GRIDNN_HOST_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}

class HostAllocator final : public Allocator {
 public:
  // `device`: the CPU, or the device stand-in's cuda:0 (core/device.h), whose memory is host
  // memory counted apart from the CPU's.
  explicit HostAllocator(Device device) : device_(device), classes_(size_classes_of(device)) {}

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (bytes > std::numeric_limits<size_t>::max() / 2) {
      std::lock_guard<std::mutex> lock(mu_);
      throw out_of_memory(bytes, bytes);
    }
    const size_t size = size_class(classes_, bytes, host_page_size());
    return size < kHostCachedFrom ? allocate_small(bytes, size) : allocate_large(bytes, size);  // as deallocate
  }

  void deallocate(void* ptr, size_t /*bytes*/) override {
    if (!ptr) return;
    std::unique_lock<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {  // a bug in the caller; called from destructors, so no throw
      std::fprintf(stderr, "gridnn: cpu allocator: freeing unknown pointer %p\n", ptr);
      std::abort();
    }
    const size_t counted = it->second;
    live_.erase(it);
    stats_.in_use -= counted;
    if (counted >= kHostCachedFrom) {  // a large block: back to the cache
      poison(ptr, counted);
      free_.emplace(counted, ptr);
      return;
    }
    stats_.reserved -= counted;
    lock.unlock();
    std::free(ptr);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  Device device() const override { return device_; }

  void release_cached() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }

  void set_limit(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
  }

 private:
  // aligned_alloc of the class `size`, with one retry after returning the cache to the system.
  void* allocate_small(size_t bytes, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      check_limit_locked(bytes, size);
      // The cache gives way to the limit (the class's memory is the C library's, outside it).
      if (limit_ > 0 && stats_.reserved + size > limit_) release_locked();
    }
    void* p = std::aligned_alloc(kHostAlignment, size);
    if (!p) {
      std::lock_guard<std::mutex> lock(mu_);
      release_locked();
      p = std::aligned_alloc(kHostAlignment, size);
      if (!p) throw out_of_memory(bytes, size);
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = size;
    ++stats_.allocations;
    ++stats_.system_allocations;
    stats_.in_use += size;
    stats_.reserved += size;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return p;
  }

  // A cached block of the class `size`, else a new one.
  void* allocate_large(size_t bytes, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    check_limit_locked(bytes, size);
    void* p = nullptr;
    if (auto it = free_.find(size); it != free_.end()) {
      p = it->second;
      free_.erase(it);
    } else {
      if (limit_ > 0 && stats_.reserved + size > limit_) release_locked();
      p = map_block(bytes, size);
    }
    live_[p] = size;
    unpoison(p, bytes);  // the tail past the requested bytes stays poisoned
    stats_.in_use += size;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return p;
  }

  // A new block of `size` bytes, with one retry after returning the cache to the system.
  // Returned poisoned.
  void* map_block(size_t requested, size_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED && !free_.empty()) {
      release_locked();
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) throw out_of_memory(requested, size);
    poison(p, size);
    ++stats_.system_allocations;
    stats_.reserved += size;
    return p;
  }

  // munmap every cached block.
  void release_locked() {
    for (auto it = free_.begin(); it != free_.end(); it = free_.erase(it)) {
      unpoison(it->second, it->first);
      if (munmap(it->second, it->first) != 0) {  // only for a corrupted address or size
        std::fprintf(stderr, "gridnn: cpu allocator: munmap of %p (%zu bytes) failed\n", it->second, it->first);
        std::abort();
      }
      stats_.reserved -= it->first;
    }
  }

  // Throws when `counted` more bytes in use would pass the limit.
  void check_limit_locked(size_t requested, size_t counted) const {
    if (limit_ > 0 && stats_.in_use + counted > limit_)
      throw memory_limit_error(device_, requested, stats_.in_use, limit_);
  }

  // The error for a request the system refused; called with mu_ held.
  Error out_of_memory(size_t requested, size_t size) const {
    return Error("out of host memory: could not allocate " + std::to_string(requested) + " bytes (" + mib(size) +
                 " block); tensors use " + mib(stats_.in_use) + ", gridnn holds " + mib(stats_.reserved) +
                 " in all; reduce the batch or the input size");
  }

 private:
  const Device device_;
  const SizeClasses classes_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;       // cached large blocks by size
  std::unordered_map<void*, size_t> live_;  // handed-out pointers and their classes
  AllocatorStats stats_;
  size_t limit_ = 0;  // bytes in use at most; 0: no limit
};

thread_local const char* scope_action = nullptr;
thread_local const std::string* scope_name = nullptr;

}  // namespace

Error memory_limit_error(const Device& device, size_t requested, size_t in_use, size_t limit) {
  const std::string where = AllocationScope::current();
  return Error("memory limit: " + (where.empty() ? std::string("an allocation outside the layers") : where) +
               " asked " + device.str() + " for " + std::to_string(requested) + " bytes with " + mib(in_use) +
               " in use, past --memory-limit " + mib(limit) +
               "; the step needs more than the limit (see --memory-report for the prediction): raise the "
               "limit, or lower the batch, or use more ranks along the depth (Pr)");
}

AllocationScope::AllocationScope(const char* action, const std::string& name)
    : previous_action_(scope_action), previous_name_(scope_name) {
  scope_action = action;
  scope_name = &name;
}
AllocationScope::~AllocationScope() {
  scope_action = previous_action_;
  scope_name = previous_name_;
}
std::string AllocationScope::current() { return scope_name ? scope_action + *scope_name : std::string(); }

Allocator& host_allocator() {
  static HostAllocator* a = new HostAllocator(Device::cpu());  // never destroyed: tensors may outlive main
  return *a;
}

namespace {

// The fronts of set_front_allocator: the CPU's, then cuda:0, cuda:1, ...
constexpr int kMaxFronts = 65;
std::atomic<Allocator*> fronts[kMaxFronts];

std::atomic<Allocator*>& front_of(const Device& d) {
  const int slot = d.is_cpu() ? 0 : d.index + 1;
  GRIDNN_REQUIRE(slot >= 0 && slot < kMaxFronts, "set_front_allocator: device ", d.str(), " out of range");
  return fronts[slot];
}

}  // namespace

void set_front_allocator(const Device& d, Allocator* front) { front_of(d).store(front); }

Allocator& allocator_for(const Device& d) {
  if (Allocator* front = front_of(d).load(std::memory_order_relaxed)) return *front;
  if (d.is_cpu()) return host_allocator();
  require_device(d);
  if (d.is_standin()) {  // cuda:0 alone (require_device): host memory
    static HostAllocator* standin = new HostAllocator(d);
    return *standin;
  }
#if GRIDNN_HAVE_CUDA
  return cuda_caching_allocator(d.index);
#else
  throw Error("unreachable: CUDA device without CUDA support");
#endif
}

}  // namespace gridnn
