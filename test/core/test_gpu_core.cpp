// Device memory, the caching allocator, the per-device context, streams and events on
// cuda:0 (label gpu: skipped without a CUDA device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/readback.h"
#include "core/transfers.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_context.h"
#include "core/stream.h"
#endif

namespace gridnn::test {
namespace {

using GpuCore = GpuTest;

// ---- tensors on the device -------------------------------------------------------------

TEST_F(GpuCore, ToRoundTripIsBitExact) {
  for (DType dt : kAllTypes)
    for (int64_t n : {int64_t(1), int64_t(1001), int64_t(3) << 20}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n = " + std::to_string(n));
      Tensor x = random_tensor({n}, 31, -1000, 1000, dt);
      Tensor g = x.to(gpu());
      EXPECT_EQ(g.device(), gpu());
      EXPECT_TRUE(tensors_equal(g.to(Device::cpu()), x));
    }
}

TEST_F(GpuCore, ToTheSameDeviceCopies) {
  Tensor g = on_gpu(random_tensor({5, 7}, 32));
  Tensor h = g.to(gpu());
  EXPECT_FALSE(h.shares_storage_with(g));
  ops::fill(g, 0.0);  // h keeps its values
  EXPECT_FALSE(tensors_equal(h, g));
  EXPECT_TRUE(tensors_equal(h, random_tensor({5, 7}, 32)));
}

TEST_F(GpuCore, CopyFromEveryDirection) {
  Tensor x = random_tensor({6, 10}, 33, -1, 1, DType::bf16);
  Tensor d1 = Tensor::empty(x.shape(), x.dtype(), gpu());
  d1.copy_from(x);  // host -> device
  Tensor d2 = Tensor::empty(x.shape(), x.dtype(), gpu());
  d2.copy_from(d1);  // device -> device
  Tensor h = Tensor::empty(x.shape(), x.dtype());
  h.copy_from(d2);  // device -> host
  EXPECT_TRUE(tensors_equal(h, x));
  ops::copy(d1, d2);
  EXPECT_TRUE(tensors_equal(d2, x));
}

TEST_F(GpuCore, CopyIntoAView) {
  Tensor big = Tensor::zeros({6, 10}, DType::f32, gpu());
  Tensor rows = on_gpu(random_tensor({3, 10}, 34));
  Tensor view = big.narrow(2, 3);
  view.copy_from(rows);
  std::vector<float> got = big.to_vector<float>(), want = rows.to_vector<float>();
  for (int64_t i = 0; i < 60; ++i) {
    const int64_t r = i / 10;
    const float expected = (r >= 2 && r < 5) ? want[size_t(i - 20)] : 0.0f;
    EXPECT_EQ(got[size_t(i)], expected) << "element " << i;
  }
}

TEST_F(GpuCore, ZerosOnDeviceEvenInAReusedBlock) {
  {
    Tensor dirty = Tensor::empty({4096}, DType::f32, gpu());
    ops::fill(dirty, 7.0);
  }  // its block goes back to the cache and is handed out again below
  Tensor z = Tensor::zeros({4096}, DType::f32, gpu());
  EXPECT_TRUE(tensors_equal(z, Tensor::zeros({4096})));
  Tensor zh = Tensor::zeros({3, 5}, DType::f16, gpu());
  EXPECT_TRUE(tensors_equal(zh, Tensor::zeros({3, 5}, DType::f16)));
}

// ---- the caching allocator -------------------------------------------------------------

void expect_consistent(const AllocatorStats& s) {
  EXPECT_LE(s.in_use, s.reserved);
  EXPECT_LE(s.in_use, s.peak_in_use);
  EXPECT_LE(s.system_allocations, s.allocations);
}

TEST_F(GpuCore, AllocatorReachesASteadyStateWithoutCudaMalloc) {
  GRIDNN_NEEDS_REAL_GPU("the caching allocator");
  Allocator& alloc = allocator_for(gpu());
  EXPECT_EQ(alloc.device(), gpu());
  EXPECT_EQ(alloc.allocate(0), nullptr);
  const std::vector<size_t> sizes = {
      4, 1000, 4096, size_t(1) << 20, (size_t(1) << 20) + 1, size_t(3) << 20, size_t(64) << 20};
  const AllocatorStats before = alloc.stats();
  auto one_step = [&] {
    std::vector<void*> ptrs;
    for (size_t s : sizes) {
      ptrs.push_back(alloc.allocate(s));
      ASSERT_NE(ptrs.back(), nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(ptrs.back()) % 256, 0u) << "size " << s;
    }
    const AllocatorStats during = alloc.stats();
    expect_consistent(during);
    size_t total = 0;
    for (size_t s : sizes) total += s;
    EXPECT_GE(during.in_use, before.in_use + total);
    for (size_t i = sizes.size(); i-- > 0;) alloc.deallocate(ptrs[i], sizes[i]);
  };
  one_step();  // warm-up: fills the cache (twice, in case blocks left by earlier work are
  one_step();  // taken first and the exact sizes only get cached in the second step)
  const AllocatorStats warm = alloc.stats();
  for (int step = 0; step < 10; ++step) one_step();
  const AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.system_allocations, warm.system_allocations) << "cudaMalloc in the steady state";
  EXPECT_EQ(after.allocations, warm.allocations + 10 * sizes.size());
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.reserved, warm.reserved);
  expect_consistent(after);
}

TEST_F(GpuCore, TensorStepLoopStopsCallingCudaMalloc) {
  GRIDNN_NEEDS_REAL_GPU("the caching allocator");
  Allocator& alloc = allocator_for(gpu());
  auto step = [] {
    Tensor x = on_gpu(random_tensor({64, 300}, 35));
    Tensor y = Tensor::empty(x.shape(), x.dtype(), gpu());
    ops::relu_forward(x, y);
    Tensor s = ops::sum(y, 1);
    Tensor z = Tensor::zeros({1000, 1000}, DType::f32, gpu());
    ops::scale(z, 2.0f);
  };
  step();
  step();
  const uint64_t warm = alloc.stats().system_allocations;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(alloc.stats().system_allocations, warm);
}

TEST_F(GpuCore, ReleaseCachedReturnsUnusedBlocks) {
  GRIDNN_NEEDS_REAL_GPU("the caching allocator");
  Allocator& alloc = allocator_for(gpu());
  Tensor kept = Tensor::empty({1 << 20}, DType::f32, gpu());
  { Tensor dropped = Tensor::empty({3 << 20}, DType::f32, gpu()); }
  const AllocatorStats cached = alloc.stats();
  EXPECT_GT(cached.reserved, cached.in_use);
  alloc.release_cached();
  const AllocatorStats released = alloc.stats();
  EXPECT_EQ(released.reserved, released.in_use);  // only blocks still in use stay reserved
  EXPECT_EQ(released.in_use, cached.in_use);
  expect_consistent(released);
  // The next request of the dropped size must go to the system again.
  { Tensor again = Tensor::empty({3 << 20}, DType::f32, gpu()); }
  EXPECT_EQ(alloc.stats().system_allocations, released.system_allocations + 1);
}

TEST_F(GpuCore, OutOfMemoryIsAClearUserError) {
  GRIDNN_NEEDS_REAL_GPU("the caching allocator");
  Allocator& alloc = allocator_for(gpu());
  try {
    alloc.allocate(size_t(1) << 50);  // 1 PiB
    FAIL() << "allocating 1 PiB succeeded";
  } catch (const BackendError& e) {
    FAIL() << "expected gridnn::Error for out of memory, got a backend error: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("batch size"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(size_t(1) << 50)), std::string::npos) << what;
  }
  Tensor fine = Tensor::zeros({16}, DType::f32, gpu());  // the device still works
  EXPECT_TRUE(tensors_equal(fine, Tensor::zeros({16})));
}

// ---- devices, context, streams and events ----------------------------------------------

TEST_F(GpuCore, MissingDeviceIsAClearError) {
  try {
    require_device(Device::cuda(99));
    FAIL() << "cuda:99 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor::empty({4}, DType::f32, Device::cuda(99)), Error);
}

// The device stand-in is a kind of device (core/device.h): every CUDA device made while it is
// on is of that kind, a GPU whose ops run on the host; a real GPU's ops do not.
TEST_F(GpuCore, TheDeviceKindSaysWhereItsOpsRun) {
  const Device d = gpu();
  EXPECT_TRUE(d.is_cuda());
  EXPECT_FALSE(d.is_cpu());
  EXPECT_EQ(d.str(), "cuda:0");
  EXPECT_EQ(Device::parse("cuda:0"), d);
  EXPECT_EQ(d.runs_on_host(), d.is_standin());
  EXPECT_EQ(Tensor::zeros({4}, DType::f32, d).device(), d);
  EXPECT_TRUE(Device::cpu().runs_on_host());
  EXPECT_FALSE(Device::cpu().is_standin());
}

// The tests below use the CUDA API directly; without CUDA their bodies are empty (and
// never run: the fixture skips), so every build lists the same tests.

TEST_F(GpuCore, ContextIsCreatedOncePerDevice) {
  GRIDNN_NEEDS_REAL_GPU("the CUDA context");
#if GRIDNN_HAVE_CUDA  // (the fixture skips first without CUDA)
  std::vector<cuda::DeviceContext*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) threads.emplace_back([&seen, i] { seen[i] = &cuda::context(0); });
  for (auto& t : threads) t.join();
  for (cuda::DeviceContext* c : seen) EXPECT_EQ(c, seen[0]);
  cuda::DeviceContext& ctx = cuda::context(0);
  EXPECT_EQ(&ctx, seen[0]);
  EXPECT_EQ(ctx.device, 0);
  EXPECT_NE(ctx.stream, nullptr);
  EXPECT_NE(ctx.cublas, nullptr);
  EXPECT_GT(ctx.properties.multiProcessorCount, 0);
  cudaStream_t bound = nullptr;
  EXPECT_EQ(cublasGetStream(ctx.cublas, &bound), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bound, ctx.stream);
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  EXPECT_EQ(cublasGetMathMode(ctx.cublas, &math), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(int(math) & 0xf, int(CUBLAS_DEFAULT_MATH)) << "no TF32 or other fast math on the handle";
  EXPECT_NE(int(math) & int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION), 0);
  int current = -1;
  EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  cuda::synchronize(0);
  EXPECT_THROW(cuda::context(99), Error);
#endif
}

TEST_F(GpuCore, StreamsAreMovableAndSynchronize) {
  GRIDNN_NEEDS_REAL_GPU("CUDA streams");
#if GRIDNN_HAVE_CUDA  // (the fixture skips first without CUDA)
  cuda::Stream s(0);
  EXPECT_NE(s.handle(), nullptr);
  EXPECT_EQ(s.device(), 0);
  cudaStream_t h = s.handle();
  cuda::Stream t = std::move(s);
  EXPECT_EQ(t.handle(), h);
  EXPECT_EQ(s.handle(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  unsigned flags = 0;
  EXPECT_EQ(cudaStreamGetFlags(t.handle(), &flags), cudaSuccess);
  EXPECT_EQ(flags & cudaStreamNonBlocking, unsigned(cudaStreamNonBlocking));
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  cuda::Stream urgent(0, greatest);
  int priority = 0;
  EXPECT_EQ(cudaStreamGetPriority(urgent.handle(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  t.synchronize();
#endif
}

#if GRIDNN_HAVE_CUDA
// The compute stream runs a long chain of work (several large GEMMs, ~20 ms on an H200)
// and only its last op writes 7 into `marker`; a second stream copies the marker out.
// Returns the value the second stream saw. With `wait`, an event recorded on the compute
// stream orders the copy after the whole chain; without it the copy runs at once.
float marker_seen_by_second_stream(bool wait) {
  constexpr int64_t kN = 4096;  // 4096^3 fp32 GEMM: ~137 GFLOP, ~2 ms each on an H200
  constexpr int kGemms = 10;
  Tensor a = Tensor::empty({kN, kN}, DType::f32, gpu());
  Tensor c = Tensor::empty({kN, kN}, DType::f32, gpu());
  ops::fill(a, 0.5);
  Tensor marker = Tensor::zeros({1}, DType::f32, gpu());
  Tensor snapshot = Tensor::zeros({1}, DType::f32, gpu());
  cuda::synchronize(0);  // marker and snapshot hold 0 before the race starts

  cuda::Stream comm(0);
  for (int i = 0; i < kGemms; ++i) ops::gemm(a, a, c);  // the compute stream's long chain
  ops::fill(marker, 7.0);                               // ... and its last op
  cuda::Event ready(0);
  ready.record(cuda::context(0).stream);
  if (wait) ready.wait(comm);
  EXPECT_EQ(cudaMemcpyAsync(snapshot.raw(), marker.raw(), sizeof(float), cudaMemcpyDeviceToDevice, comm.handle()),
            cudaSuccess);
  comm.synchronize();
  if (wait) {
    EXPECT_TRUE(ready.query()) << "the waiting stream finished before the event";
  }
  ready.synchronize();
  cuda::synchronize(0);
  EXPECT_EQ(marker.to_vector<float>()[0], 7.0f);
  return snapshot.to_vector<float>()[0];
}
#endif

TEST_F(GpuCore, EventsOrderWorkAcrossStreams) {
  GRIDNN_NEEDS_REAL_GPU("CUDA streams and events");
#if GRIDNN_HAVE_CUDA  // (the fixture skips first without CUDA)
  // Control: without the wait, the second stream must (at least once in three tries) read
  // the marker before the chain is done, or the producer's work is too short for the
  // ordered run below to prove anything.
  int unordered_early = 0;
  for (int attempt = 0; attempt < 3 && unordered_early == 0; ++attempt)
    if (marker_seen_by_second_stream(false) == 0.0f) ++unordered_early;
  EXPECT_GT(unordered_early, 0) << "the compute stream's chain finished before an unordered "
                                   "copy on another stream ran: make the chain longer";
  // With the event wait, the copy sees the last op's value every time.
  for (int attempt = 0; attempt < 3; ++attempt)
    EXPECT_EQ(marker_seen_by_second_stream(true), 7.0f) << "attempt " << attempt;
#endif
}

TEST_F(GpuCore, TimingEventsMeasureElapsedTime) {
  GRIDNN_NEEDS_REAL_GPU("CUDA events");
#if GRIDNN_HAVE_CUDA  // (the fixture skips first without CUDA)
  cuda::Stream s(0);
  cuda::Event start(0, true), end(0, true);
  start.record(s);
  Tensor x = Tensor::empty({1 << 22}, DType::f32, gpu());
  ASSERT_EQ(cudaMemsetAsync(x.raw(), 0, x.nbytes(), s.handle()), cudaSuccess);
  end.record(s);
  end.synchronize();
  EXPECT_TRUE(end.query());
  const float ms = cuda::Event::elapsed_ms(start, end);
  EXPECT_GE(ms, 0.0f);
  EXPECT_TRUE(std::isfinite(ms));
  s.synchronize();
  cuda::Event moved = std::move(start);
  EXPECT_NE(moved.handle(), nullptr);
#endif
}

// core/readback.h on cuda:0: the values as they were when the copy was queued (a later
// kernel overwriting the source is ordered after it), one download counted.
TEST_F(GpuCore, ReadbackCopiesWithoutWaitingAndKeepsStreamOrder) {
  Tensor g = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4}).to(gpu());
  Readback r;
  reset_transfer_counts();
  r.start(g);
  ops::fill(g, 7.0);  // queued after the copy
  EXPECT_EQ(transfer_counts().downloads, 1);
  EXPECT_EQ(r.finish().to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  r.start(g.narrow(1, 2));
  EXPECT_EQ(r.finish().to_vector<float>(), (std::vector<float>{7, 7}));
}

}  // namespace
}  // namespace gridnn::test
