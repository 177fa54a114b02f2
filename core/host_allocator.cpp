#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>

#include "core/allocator.h"
#include "core/error.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_allocator.h"
#endif

namespace gridnn {
namespace {

constexpr size_t kHostAlignment = 64;  // a cache line, and enough for any SIMD load

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* p = std::aligned_alloc(kHostAlignment, rounded);
    if (!p)
      throw Error("out of host memory: could not allocate " + std::to_string(bytes) +
                  " bytes; reduce the batch or the input size");
    std::lock_guard<std::mutex> lock(mu_);
    stats_.in_use += bytes;
    stats_.reserved += bytes;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    ++stats_.allocations;
    ++stats_.system_allocations;
    return p;
  }

  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return;
    std::free(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.in_use -= bytes;
    stats_.reserved -= bytes;
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  Device device() const override { return Device::cpu(); }

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& host_allocator() {
  static HostAllocator* a = new HostAllocator;  // never destroyed: tensors may outlive main
  return *a;
}

Allocator& allocator_for(const Device& d) {
  if (d.is_cpu()) return host_allocator();
  require_device(d);
#if GRIDNN_HAVE_CUDA
  return cuda_caching_allocator(d.index);
#else
  throw Error("unreachable: CUDA device without CUDA support");
#endif
}

}  // namespace gridnn
