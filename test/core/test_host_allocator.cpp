// The host allocator: large blocks cached and handed out again (no system allocation in the
// steady state of a training step), size classes (the bytes in use are the classes of the
// live requests, whatever is cached), release_cached(), alignment, threads, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/size_class.h"
#include "core/tensor.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kMinCached = 256 * kKiB;  // the smallest request the allocator caches

void expect_consistent(const AllocatorStats& s) {
  EXPECT_LE(s.in_use, s.reserved);
  EXPECT_LE(s.in_use, s.peak_in_use);
  EXPECT_LE(s.system_allocations, s.allocations);
}

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// Writes a pattern over all `bytes` of `p`, then reads it back.
bool writable(void* p, size_t bytes, unsigned char seed) {
  auto* c = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) c[i] = static_cast<unsigned char>(seed + i * 31);
  for (size_t i = 0; i < bytes; ++i)
    if (c[i] != static_cast<unsigned char>(seed + i * 31)) return false;
  return true;
}

// The allocations of a training step: activations kept for the backward pass, temporaries
// freed at once, small tensors (biases, statistics) in between.
struct Step {
  std::vector<std::pair<Shape, DType>> shapes = {
      {{8, 16, 32, 32, 32}, DType::f32},  // 16 MiB
      {{8, 32, 16, 16, 16}, DType::f32},  // 4 MiB
      {{16}, DType::f32},
      {{8, 16, 32, 32, 32}, DType::f16},  // 8 MiB
      {{1 << 16}, DType::f32},            // 256 KiB: the smallest cached size
      {{64, 1000}, DType::f32},           // 250 KiB: just below, not cached
      {{8, 16, 32, 32, 32}, DType::f32},  // a second 16 MiB one while the first is held
      {{3, 3, 3, 16, 16}, DType::f32},
      {{8, 64, 8, 8, 8}, DType::bf16},  // 512 KiB
      {{8, 2}, DType::i64},
  };

  size_t small_count() const {
    size_t n = 0;
    for (const auto& [shape, dtype] : shapes)
      if (size_t(shape.numel()) * dtype_size(dtype) < kMinCached) ++n;
    return n;
  }

  void run() const {
    std::vector<Tensor> kept;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor t = Tensor::empty(shapes[i].first, shapes[i].second);
      EXPECT_TRUE(aligned64(t.raw()));
      std::memset(t.raw(), int(i), t.nbytes());      // touch every page, as a kernel would
      if (i % 3 != 1) kept.push_back(std::move(t));  // every third one is a temporary
    }
    while (!kept.empty()) kept.pop_back();  // the backward pass frees in reverse order
  }
};

TEST(HostAllocator, TrainingStepLoopMakesNoSystemAllocationForLargeTensors) {
  Allocator& alloc = host_allocator();
  EXPECT_EQ(alloc.device(), Device::cpu());
  const Step step;
  ASSERT_GT(step.small_count(), 0u);
  ASSERT_LT(step.small_count(), step.shapes.size());
  const AllocatorStats before = alloc.stats();
  step.run();  // warm-up: fills the cache (twice, in case blocks left by earlier work are
  step.run();  // taken first and the exact sizes only get cached in the second step)
  const AllocatorStats warm = alloc.stats();
  EXPECT_EQ(warm.in_use, before.in_use);
  EXPECT_GT(warm.reserved, warm.in_use);  // the large blocks stay cached
  const int steps = 5;
  for (int i = 0; i < steps; ++i) step.run();
  const AllocatorStats after = alloc.stats();
  // Only the small tensors reach the system (aligned_alloc, served from the C library's
  // free lists); the large ones come from the cache every time.
  EXPECT_EQ(after.system_allocations, warm.system_allocations + steps * step.small_count());
  EXPECT_EQ(after.allocations, warm.allocations + steps * step.shapes.size());
  EXPECT_EQ(after.reserved, warm.reserved);
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.peak_in_use, warm.peak_in_use);
  expect_consistent(after);
}

TEST(HostAllocator, ACachedBlockServesOnlyRequestsOfItsClass) {
  Allocator& alloc = host_allocator();
  alloc.release_cached();  // nothing cached: every block below is known
  const AllocatorStats start = alloc.stats();
  EXPECT_EQ(start.reserved, start.in_use);
  const size_t page = host_page_size();

  void* p = alloc.allocate(4 * kMiB);
  EXPECT_EQ(alloc.stats().system_allocations, start.system_allocations + 1);
  alloc.deallocate(p, 4 * kMiB);
  EXPECT_EQ(alloc.stats().reserved, start.reserved + 4 * kMiB);  // cached, not returned

  // 3.5 MiB would fit the 4 MiB block, but its spare half MiB would count as in use: a new
  // block, counted as its own class.
  void* q = alloc.allocate(3 * kMiB + kMiB / 2);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.system_allocations, start.system_allocations + 2);
  EXPECT_NE(q, p);
  EXPECT_EQ(s.in_use, start.in_use + 3 * kMiB + kMiB / 2);
  EXPECT_EQ(s.reserved, start.reserved + 7 * kMiB + kMiB / 2);
  // A request a few bytes under 4 MiB is of the 4 MiB class (whole pages): the cached block.
  void* r = alloc.allocate(4 * kMiB - 100);
  s = alloc.stats();
  EXPECT_EQ(r, p);
  EXPECT_EQ(s.system_allocations, start.system_allocations + 2);
  EXPECT_EQ(s.in_use, start.in_use + 7 * kMiB + kMiB / 2);
  // One byte more than a class: the next page's class, a new block.
  void* t = alloc.allocate(4 * kMiB + 1);
  EXPECT_EQ(alloc.stats().system_allocations, start.system_allocations + 3);
  EXPECT_EQ(alloc.stats().in_use, start.in_use + 11 * kMiB + kMiB / 2 + page);
  alloc.deallocate(t, 4 * kMiB + 1);
  alloc.deallocate(r, 4 * kMiB - 100);
  alloc.deallocate(q, 3 * kMiB + kMiB / 2);
  EXPECT_EQ(alloc.stats().in_use, start.in_use);
  expect_consistent(alloc.stats());
  alloc.release_cached();
}

// The property the memory model relies on: whatever blocks are cached, and in whatever order
// tensors are made and freed, the bytes in use are the sum of the live requests' classes.
TEST(HostAllocator, BytesInUseAreTheSumOfTheLiveRequestsClasses) {
  Allocator& alloc = host_allocator();
  const size_t page = host_page_size();
  const std::vector<size_t> sizes = {1,
                                     63,
                                     64,
                                     65,
                                     4000,
                                     kMinCached - 1,
                                     kMinCached,
                                     kMinCached + 1,
                                     3 * kMiB + 17,
                                     3 * kMiB + kMiB / 2,
                                     4 * kMiB,
                                     5 * kMiB - 3};
  const size_t base = alloc.stats().in_use;
  std::vector<std::pair<void*, size_t>> live;
  size_t expected = 0;
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
  for (int i = 0; i < 400; ++i) {
    if (!live.empty() && next() % 3 == 0) {  // free a random live one
      const size_t k = next() % live.size();
      alloc.deallocate(live[k].first, live[k].second);
      expected -= size_class(SizeClasses::host, live[k].second, page);
      live.erase(live.begin() + std::ptrdiff_t(k));
    } else {
      const size_t bytes = sizes[next() % sizes.size()];
      live.emplace_back(alloc.allocate(bytes), bytes);
      expected += size_class(SizeClasses::host, bytes, page);
    }
    ASSERT_EQ(alloc.stats().in_use, base + expected) << "after " << i + 1 << " calls";
  }
  for (auto& [ptr, bytes] : live) alloc.deallocate(ptr, bytes);
  EXPECT_EQ(alloc.stats().in_use, base);
}

TEST(SizeClass, HostAndCudaClasses) {
  const size_t page = 4096;
  using C = SizeClasses;
  EXPECT_EQ(size_class(C::host, 0, page), 0u);
  EXPECT_EQ(size_class(C::host, 1, page), 64u);
  EXPECT_EQ(size_class(C::host, 64, page), 64u);
  EXPECT_EQ(size_class(C::host, 65, page), 128u);
  EXPECT_EQ(size_class(C::host, kMinCached - 1, page), kMinCached);  // a multiple of 64 still
  EXPECT_EQ(size_class(C::host, kMinCached - 65, page), kMinCached - 64);
  EXPECT_EQ(size_class(C::host, kMinCached, page), kMinCached);
  EXPECT_EQ(size_class(C::host, kMinCached + 1, page), kMinCached + page);  // whole pages
  EXPECT_EQ(size_class(C::host, 3 * kMiB + 1, 16384), 3 * kMiB + 16384);
  EXPECT_EQ(size_class(C::cuda, 0, page), 0u);
  EXPECT_EQ(size_class(C::cuda, 1, page), 512u);
  EXPECT_EQ(size_class(C::cuda, 513, page), 1024u);
  EXPECT_EQ(size_class(C::cuda, kMiB, page), kMiB);
  EXPECT_EQ(size_class(C::cuda, kMiB + 1, page), 2 * kMiB);  // 2 MiB granules above 1 MiB
  EXPECT_EQ(size_class(C::cuda, 5 * kMiB, page), 6 * kMiB);
  EXPECT_EQ(size_class(C::cuda, 6 * kMiB, page), 6 * kMiB);
  EXPECT_EQ(size_classes_of(Device::cpu()), C::host);
  EXPECT_EQ(block_bytes(Device::cpu(), 100), 128u);
  EXPECT_EQ(size_classes_of(Device{Device::Kind::cuda_standin, 0}), C::cuda);  // checks a GPU's prediction here
  EXPECT_THROW(size_class(C::cuda, SIZE_MAX - 10, page), Error);
}

TEST(HostAllocator, ReleaseCachedReturnsUnusedBlocks) {
  Allocator& alloc = host_allocator();
  Tensor kept = Tensor::empty({1 << 20}, DType::f32);
  { Tensor dropped = Tensor::empty({3 << 20}, DType::f32); }
  Tensor small = Tensor::empty({100}, DType::f32);
  const AllocatorStats cached = alloc.stats();
  EXPECT_GE(cached.reserved, cached.in_use + (size_t(12) << 20));
  alloc.release_cached();
  const AllocatorStats released = alloc.stats();
  EXPECT_EQ(released.reserved, released.in_use);  // only memory still in use stays reserved
  EXPECT_EQ(released.in_use, cached.in_use);
  expect_consistent(released);
  // The next request of the dropped size goes to the system again.
  { Tensor again = Tensor::empty({3 << 20}, DType::f32); }
  EXPECT_EQ(alloc.stats().system_allocations, released.system_allocations + 1);
  alloc.release_cached();
  EXPECT_EQ(alloc.stats().reserved, alloc.stats().in_use);
}

TEST(HostAllocator, MemoryIsAlignedAndWritableOverItsWholeSize) {
  Allocator& alloc = host_allocator();
  EXPECT_EQ(alloc.allocate(0), nullptr);
  alloc.deallocate(nullptr, 0);
  const AllocatorStats start = alloc.stats();
  const std::vector<size_t> sizes = {
      1, 63, 65, 4000, kMinCached - 1, kMinCached, kMinCached + 1, 3 * kMiB + 7, kMiB, kMinCached + 4096};
  for (int round = 0; round < 2; ++round) {  // the second round reuses cached blocks
    std::vector<void*> ptrs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      void* p = alloc.allocate(sizes[i]);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(aligned64(p)) << "size " << sizes[i];
      EXPECT_TRUE(writable(p, sizes[i], static_cast<unsigned char>(i + round))) << "size " << sizes[i];
      ptrs.push_back(p);
    }
    expect_consistent(alloc.stats());
    for (size_t i = 0; i < sizes.size(); ++i) alloc.deallocate(ptrs[i], sizes[i]);
    EXPECT_EQ(alloc.stats().in_use, start.in_use);
  }
}

TEST(HostAllocator, TensorsMayBeFreedOnAnotherThread) {
  Allocator& alloc = host_allocator();
  const size_t start = alloc.stats().in_use;
  // A producer allocates, a consumer frees (as the data loader's prefetch thread hands
  // batches over), while two more threads allocate and free on their own.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Tensor> queue;
  bool done = false;
  std::thread consumer([&] {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done || !queue.empty(); });
      if (queue.empty()) return;
      Tensor t = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      EXPECT_EQ(t.data<float>()[t.numel() - 1], float(t.numel()));
    }  // t freed here, on this thread
  });
  std::atomic<int> failures{0};
  auto own_work = [&](int seed) {
    for (int i = 0; i < 200; ++i) {
      const int64_t n = (i * 7919 + seed * 104729) % (1 << 19) + 1;  // up to 2 MiB of floats
      Tensor t = Tensor::empty({n});
      float* d = t.data<float>();
      d[0] = 1.0f;
      d[n - 1] = 2.0f;
      if (d[0] != 1.0f || d[n - 1] != 2.0f) ++failures;
    }
  };
  std::thread w1(own_work, 1), w2(own_work, 2);
  for (int i = 0; i < 300; ++i) {
    const int64_t n = i % 3 == 0 ? 64 : (int64_t(1) << 16) * (1 + i % 5);
    Tensor t = Tensor::empty({n});
    t.data<float>()[n - 1] = float(n);
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(t));
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_one();
  consumer.join();
  w1.join();
  w2.join();
  EXPECT_EQ(failures.load(), 0);
  const AllocatorStats end = alloc.stats();
  EXPECT_EQ(end.in_use, start);
  expect_consistent(end);
}

TEST(HostAllocator, OutOfMemoryReleasesTheCacheThenIsAClearUserError) {
  Allocator& alloc = host_allocator();
  { Tensor dropped = Tensor::empty({1 << 20}, DType::f32); }  // leaves a block cached
  ASSERT_GT(alloc.stats().reserved, alloc.stats().in_use);
  const size_t huge = size_t(1) << 50;  // 1 PiB
  const std::string what = test::error_message([&] { alloc.allocate(huge); });
  EXPECT_NE(what.find("out of host memory"), std::string::npos) << what;
  EXPECT_NE(what.find(std::to_string(huge)), std::string::npos) << what;
  EXPECT_NE(what.find("reduce the batch"), std::string::npos) << what;
  const AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.reserved, after.in_use);  // the cache was returned before the retry
  const std::string wrap = test::error_message([&] { alloc.allocate(SIZE_MAX); });
  EXPECT_NE(wrap.find("out of host memory"), std::string::npos) << wrap;
  EXPECT_EQ(alloc.stats().in_use, after.in_use);
  Tensor fine = Tensor::zeros({1 << 20});  // the allocator still works
  EXPECT_EQ(fine.data<float>()[(1 << 20) - 1], 0.0f);
}

TEST(HostAllocatorDeathTest, FreeingAnUnknownPointerAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  static float not_from_the_allocator[16];
  EXPECT_DEATH(host_allocator().deallocate(not_from_the_allocator, sizeof not_from_the_allocator), "unknown pointer");
  EXPECT_DEATH(host_allocator().deallocate(not_from_the_allocator, 4 * kMiB), "unknown pointer");
}

// --memory-limit's cap: a request that would take the bytes in use past the limit fails,
// naming the allocation scope, the request and the limit; under the limit, and after it is
// lifted, allocations succeed again. A cached block larger than the request but past the limit
// is not handed out either.
TEST(HostAllocator, TheLimitRefusesWhatWouldPassItAndNamesTheScope) {
  Allocator& alloc = host_allocator();
  const size_t base = alloc.stats().in_use;
  alloc.set_limit(base + 8 * kMiB);
  void* a = alloc.allocate(6 * kMiB);  // under the limit
  std::string message;
  const std::string layer = "layer1.0.conv1", block = "layer1.0";
  {
    const AllocationScope outer("the forward of block ", block);
    {
      const AllocationScope scope("the backward of ", layer);
      message = test::error_message([&] { alloc.allocate(4 * kMiB); });
    }
    EXPECT_EQ(AllocationScope::current(), "the forward of block layer1.0");  // the outer one again
  }
  EXPECT_NE(message.find("memory limit: the backward of layer1.0.conv1 asked cpu for 4194304 bytes"), std::string::npos)
      << message;
  EXPECT_NE(message.find("--memory-limit"), std::string::npos) << message;
  EXPECT_EQ(AllocationScope::current(), "");
  // Small requests count too.
  EXPECT_NE(test::error_message([&] { alloc.allocate(3 * kMiB - 1000); }).find("outside the layers"),
            std::string::npos);
  void* b = alloc.allocate(1 * kMiB);  // still fits
  alloc.deallocate(b, 1 * kMiB);
  alloc.set_limit(0);  // lifted
  void* c = alloc.allocate(4 * kMiB);
  alloc.deallocate(c, 4 * kMiB);
  alloc.deallocate(a, 6 * kMiB);
  // The 6 and 4 MiB blocks are cached now. A 5 MiB request takes neither (another class),
  // and the new block would take what gridnn holds past the limit: the cache gives way.
  ASSERT_GE(alloc.stats().reserved, alloc.stats().in_use + 10 * kMiB);
  const size_t limit = alloc.stats().in_use + 5 * kMiB + 4096;
  alloc.set_limit(limit);
  void* d = alloc.allocate(5 * kMiB);
  EXPECT_LE(alloc.stats().in_use, limit);
  EXPECT_LE(alloc.stats().reserved, limit);
  alloc.deallocate(d, 5 * kMiB);
  alloc.set_limit(0);
}

}  // namespace
}  // namespace gridnn
