// The NCCL communicator and the pinned staging of device tensors on cuda:0 (label gpu:
// skipped without a CUDA device, and the NCCL tests also without NCCL in the build).
//
// One process, no MPI (the GPU check machine has no mpiexec): the NCCL communicators are
// groups of one rank joined through a unique id made here. Every collective on device tensors
// must equal the same collective of the self communicator on host copies (bit for bit: a
// group of one reduces nothing, so any difference is a wrong offset, count, type or a race
// between the NCCL stream and the compute stream); the comm log counts like the MPI backend;
// start_all_reduce completes through test() and wait(); the ordering rule's requirement and
// the NCCL settings that would break it are refused; the pinned pool stages round trips and
// reuses its buffers. Between ranks (two on the one GPU, NCCL over loopback sockets under the
// test switch GRIDNN_TEST_NCCL_LOOPBACK): test_gpu_grid_nccl_loopback_np2 runs the grid's
// collectives, halos, gathers and training steps, and nccl_stalled_rank_ends_the_job the
// watchdog's time limit. The CTA limit's residency argument needs peers on other GPUs: no test
// covers it (docs/design.md §4, §9).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "parallel/communicator.h"
#include "parallel/pinned_staging.h"
#include "parallel/process_grid.h"
#include "test/support/error_message.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

#if GRIDNN_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace gridnn::test {
namespace {

using parallel::Communicator;
using parallel::ReduceOp;

// ---- pinned staging (CUDA builds, with or without MPI / NCCL) -------------------------------

using GpuPinnedStaging = GpuTest;

TEST_F(GpuPinnedStaging, DeviceTensorRoundTripsThroughPinnedMemory) {
  parallel::PinnedPool pool;
  for (DType dt : kAllTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor({37, 129}, 11, -100, 100, dt);
    Tensor d = on_gpu(x);
    {
      parallel::StagedTensor staged(pool, d, /*fill=*/true);
      ASSERT_TRUE(staged.staged());
      EXPECT_EQ(std::memcmp(staged.data(), x.raw(), x.nbytes()), 0);  // device -> pinned
      const Tensor y = random_tensor({37, 129}, 12, -100, 100, dt);
      std::memcpy(staged.data(), y.raw(), y.nbytes());
      staged.store(d);  // pinned -> device
      EXPECT_TRUE(tensors_equal(d.to(Device::cpu()), y));
    }
  }
  // One buffer served every dtype (each lease ended before the next began).
  EXPECT_EQ(pool.buffers(), 1u);
  EXPECT_EQ(pool.host_allocations(), 1);
}

TEST_F(GpuPinnedStaging, HostTensorsLendTheirOwnStorage) {
  parallel::PinnedPool pool;
  Tensor h = random_tensor({8, 8}, 13);
  parallel::StagedTensor staged(pool, h, /*fill=*/true);
  EXPECT_FALSE(staged.staged());
  EXPECT_EQ(staged.data(), h.raw());
  EXPECT_EQ(pool.buffers(), 0u);
}

TEST_F(GpuPinnedStaging, PoolReusesGrowsAndHoldsOneBufferPerConcurrentLease) {
  parallel::PinnedPool pool;
  {
    auto a = pool.acquire(1000);
    EXPECT_GE(a.bytes(), 1000u);
    EXPECT_NE(a.data(), nullptr);
  }
  {
    auto b = pool.acquire(500);  // fits the returned buffer: no new allocation
    EXPECT_EQ(pool.host_allocations(), 1);
  }
  {
    auto c = pool.acquire(size_t(8) << 20);  // larger: the free buffer is grown in place
    EXPECT_GE(c.bytes(), size_t(8) << 20);
    EXPECT_EQ(pool.buffers(), 1u);
    EXPECT_EQ(pool.host_allocations(), 2);
    auto d = pool.acquire(100);  // c is leased: a second buffer
    EXPECT_EQ(pool.buffers(), 2u);
    EXPECT_NE(c.data(), d.data());
    std::memset(c.data(), 1, c.bytes());  // really usable host memory
    std::memset(d.data(), 2, d.bytes());
  }
  auto e = pool.acquire(size_t(4) << 20);  // the big free buffer: no allocation
  EXPECT_EQ(pool.host_allocations(), 3);
  EXPECT_GE(pool.reserved_bytes(), size_t(8) << 20);
}

// ---- the NCCL communicator ---------------------------------------------------------------------

class GpuNccl : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    GRIDNN_NEEDS_REAL_GPU("NCCL");
#if !GRIDNN_HAVE_NCCL
    GTEST_SKIP() << "gridnn was built without NCCL (needs -DGRIDNN_CUDA=ON and NCCL 2 found at configure)";
#else
    nccl_ = parallel::make_nccl_communicator(parallel::make_nccl_unique_id(), 0, 1, 0, "row", nullptr);
    self_ = parallel::make_self_communicator("row");
    parallel::comm_log().clear();
#endif
  }
  void TearDown() override { parallel::comm_log().clear(); }

  std::unique_ptr<Communicator> nccl_, self_;  // the NCCL group of one; the host reference
};

TEST_F(GpuNccl, AllReduceEqualsTheHostResult) {
  for (DType dt : {DType::f32, DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (op == ReduceOp::sum ? " sum" : " max"));
      Tensor host = random_tensor({3, 1000}, 21, -50, 50, dt);
      Tensor dev = on_gpu(host);
      self_->all_reduce(host, op);
      nccl_->all_reduce(dev, op);
      EXPECT_TRUE(tensors_equal(dev.to(Device::cpu()), host));
    }
}

TEST_F(GpuNccl, GathersScattersBroadcastAndSendRecvEqualTheHostResults) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor in = random_tensor({5, 7, 3}, 22, -9, 9, dt);
    const std::vector<int64_t> rows{5};
    {
      Tensor out_h = Tensor::zeros({5, 7, 3}, dt), out_d = Tensor::zeros({5, 7, 3}, dt, gpu());
      self_->all_gather(in, out_h);
      nccl_->all_gather(on_gpu(in), out_d);
      EXPECT_TRUE(tensors_equal(out_d.to(Device::cpu()), out_h));
      out_d = Tensor::zeros({5, 7, 3}, dt, gpu());
      nccl_->all_gatherv(on_gpu(in), out_d, rows);
      EXPECT_TRUE(tensors_equal(out_d.to(Device::cpu()), out_h));
    }
    if (dt != DType::bf16) {  // reductions: f32, i32, i64
      Tensor out_h = Tensor::zeros({5, 7, 3}, dt), out_d = Tensor::zeros({5, 7, 3}, dt, gpu());
      self_->reduce_scatter(in, out_h);
      nccl_->reduce_scatter(on_gpu(in), out_d);
      EXPECT_TRUE(tensors_equal(out_d.to(Device::cpu()), out_h));
      out_d = Tensor::zeros({5, 7, 3}, dt, gpu());
      nccl_->reduce_scatterv(on_gpu(in), out_d, rows);
      EXPECT_TRUE(tensors_equal(out_d.to(Device::cpu()), out_h));
    }
    {
      Tensor d = on_gpu(in);
      nccl_->broadcast(d, 0);
      EXPECT_TRUE(tensors_equal(d.to(Device::cpu()), in));
    }
    {
      Tensor recv = Tensor::zeros({5, 7, 3}, dt, gpu());
      nccl_->send_recv(on_gpu(in), 0, recv, 0, 7);  // to and from itself
      EXPECT_TRUE(tensors_equal(recv.to(Device::cpu()), in));
      Tensor both = on_gpu(in);  // send and receive the very same tensor
      nccl_->send_recv(both, 0, both, 0, 8);
      EXPECT_TRUE(tensors_equal(both.to(Device::cpu()), in));
    }
  }
}

TEST_F(GpuNccl, InPlaceGatherAndScatterViews) {
  // all_gather with `in` = this rank's block of `out`, reduce_scatter with `out` = this
  // rank's block of `in`: NCCL's in-place forms.
  const Tensor x = random_tensor({4, 6}, 23);
  Tensor buf = on_gpu(x);
  Tensor block = buf.narrow(0, 4);  // (one rank: the whole buffer)
  nccl_->all_gather(block, buf);
  EXPECT_TRUE(tensors_equal(buf.to(Device::cpu()), x));
  nccl_->reduce_scatter(buf, block);
  EXPECT_TRUE(tensors_equal(buf.to(Device::cpu()), x));
}

TEST_F(GpuNccl, OrderedAfterTheComputeStreamAndBeforeIt) {
  // A kernel writes `in` on the compute stream just before the gather (NCCL must wait for
  // it), and another overwrites `in` just after (it must not run before NCCL has read it).
  const int64_t n = int64_t(1) << 22;
  Tensor in = Tensor::zeros({n}, DType::f32, gpu());
  Tensor out = Tensor::zeros({n}, DType::f32, gpu());
  for (int round = 1; round <= 3; ++round) {
    ops::fill(in, double(round));
    nccl_->all_gather(in, out);
    ops::fill(in, -1.0);
    const std::vector<float> got = out.to_vector<float>();
    ASSERT_EQ(got.front(), float(round));
    ASSERT_EQ(got[size_t(n / 2)], float(round));
    ASSERT_EQ(got.back(), float(round));
  }
}

TEST_F(GpuNccl, HostTensorsGoToTheHostCommunicatorAndMixesAreRefused) {
  Tensor h = random_tensor({10}, 24);
  const Tensor expected = h.clone();
  nccl_->all_reduce(h, ReduceOp::sum);  // a group of one: the self communicator
  EXPECT_TRUE(tensors_equal(h, expected));
  Tensor out_d = Tensor::zeros({10}, DType::f32, gpu());
  const std::string what = error_message([&] { nccl_->all_gather(h, out_d); });
  EXPECT_NE(what.find("mix host and device"), std::string::npos) << what;
  EXPECT_NE(what.find("all_gather on communicator \"row\""), std::string::npos) << what;
}

TEST_F(GpuNccl, EveryCallIsCountedLikeTheMpiBackend) {
  Tensor t = Tensor::zeros({6, 4}, DType::f32, gpu());
  Tensor gathered = Tensor::zeros({6, 4}, DType::f32, gpu());
  Tensor half = Tensor::zeros({6, 4}, DType::i64, gpu());
  {
    parallel::CommLayerScope scope("layer1.conv");
    nccl_->all_reduce(t);
    nccl_->all_gather(t, gathered);
    nccl_->reduce_scatterv(gathered, t, {6});
    nccl_->broadcast(half, 0);
    nccl_->send_recv(t, 0, gathered, 0, 1);
    nccl_->send_recv(Tensor(), -1, gathered, -1, 2);  // neither side: 0 elements
    nccl_->barrier();
  }
  const auto& records = parallel::comm_log().records();
  ASSERT_EQ(records.size(), 7u);
  const char* ops[] = {"all_reduce", "all_gather", "reduce_scatterv", "broadcast", "send_recv", "send_recv", "barrier"};
  const int64_t elements[] = {24, 24, 24, 24, 24, 0, 0};
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(ops[i]);
    EXPECT_EQ(records[i].comm, "row");
    EXPECT_EQ(records[i].op, ops[i]);
    EXPECT_EQ(records[i].layer, "layer1.conv");
    EXPECT_EQ(records[i].elements, elements[i]);
    EXPECT_GE(records[i].seconds, 0.0);
  }
  EXPECT_EQ(records[3].bytes, 24 * 8);  // i64
  EXPECT_EQ(parallel::comm_log().elements("row", "send_recv"), 24);
}

TEST_F(GpuNccl, StartAllReduceCompletesThroughWaitAndTest) {
  const Tensor x = random_tensor({1000}, 25);
  Tensor a = on_gpu(x), b = on_gpu(x);
  std::unique_ptr<parallel::PendingCall> pa, pb;
  {
    parallel::CommLayerScope scope("layer2.fc");
    pa = nccl_->start_all_reduce(a);
    pb = nccl_->start_all_reduce(b, ReduceOp::max);
  }
  EXPECT_TRUE(parallel::comm_log().records().empty());  // recorded on completion
  pa->wait();
  ops::fill(a, 0.0);  // ordered after the all-reduce on the compute stream
  EXPECT_TRUE(tensors_equal(a.to(Device::cpu()), Tensor::zeros({1000}, DType::f32)));
  while (!pb->test()) {
  }
  EXPECT_TRUE(pb->test());  // stays complete
  pb->wait();
  EXPECT_TRUE(tensors_equal(b.to(Device::cpu()), x));
  const auto& records = parallel::comm_log().records();
  ASSERT_EQ(records.size(), 2u);  // once each, however often test() or wait() ran
  for (const auto& r : records) {
    EXPECT_EQ(r.op, "all_reduce");
    EXPECT_EQ(r.layer, "layer2.fc");
    EXPECT_EQ(r.elements, 1000);
  }
}

TEST_F(GpuNccl, ProcessGridWithTheNcclBackend) {
  // One process without MPI running: the 1x1 grid's communicators are NCCL groups of one.
  auto grid = parallel::ProcessGrid::create({1, 1, 1}, parallel::CommBackend::nccl, gpu());
  EXPECT_EQ(grid->backend(), parallel::CommBackend::nccl);
  const Tensor x = random_tensor({64}, 26);
  Tensor d = on_gpu(x);
  grid->stage_comm().all_reduce(d);
  EXPECT_TRUE(tensors_equal(d.to(Device::cpu()), x));
  EXPECT_EQ(parallel::comm_log().elements("stage", "all_reduce"), 64);
  auto cpu_grid = parallel::ProcessGrid::create({1, 1, 1}, parallel::CommBackend::automatic, Device::cpu());
  EXPECT_EQ(cpu_grid->backend(), parallel::CommBackend::mpi);
  const std::string what = error_message([&] {
    parallel::ProcessGrid::create({1, 1, 1}, parallel::CommBackend::nccl, Device::cpu());
  });
  EXPECT_NE(what.find("needs a CUDA device"), std::string::npos) << what;
}

// docs/design.md §4: a communicator runs its operations in issue order, so a transfer behind
// an all-reduce started on it and not yet waited for is refused (it could deadlock), and
// accepted once that all-reduce was waited for.
TEST_F(GpuNccl, ATransferBehindAStartedAllReduceIsRefusedUntilWaited) {
  Tensor a = on_gpu(random_tensor({1000}, 27));
  const Tensor x = random_tensor({24}, 28);
  Tensor recv = Tensor::empty({24}, DType::f32, gpu());
  std::unique_ptr<parallel::PendingCall> pending = nccl_->start_all_reduce(a);
  const std::string what = error_message([&] { nccl_->send_recv(on_gpu(x), 0, recv, 0, 3); });
  EXPECT_NE(what.find("has not been waited for"), std::string::npos) << what;
  pending->wait();
  nccl_->send_recv(on_gpu(x), 0, recv, 0, 3);
  EXPECT_TRUE(tensors_equal(recv.to(Device::cpu()), x));
}

TEST_F(GpuNccl, SettingsThatBreakTheOrderingAreRefused) {
  for (const char* name : {"NCCL_LAUNCH_ORDER_IMPLICIT", "NCCL_COMM_BLOCKING"}) {
    SCOPED_TRACE(name);
    const char* value = std::strcmp(name, "NCCL_COMM_BLOCKING") == 0 ? "0" : "1";
    ASSERT_EQ(setenv(name, value, 1), 0);
#if GRIDNN_HAVE_NCCL  // (SetUp skips the test otherwise)
    const std::string what = error_message(
        [&] { parallel::make_nccl_communicator(parallel::make_nccl_unique_id(), 0, 1, 0, "col", nullptr); });
#else
    const std::string what;
#endif
    unsetenv(name);
    EXPECT_NE(what.find(std::string(name) + "=" + value), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace gridnn::test
