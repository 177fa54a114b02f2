// The MPI communicator under mpiexec -n 1, 2, 4 (label mpi): every collective against a
// closed form, bitwise-identical reductions on every rank, argument errors, counting.
// Sizes stay tiny: 4 ranks share 2 cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/half.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#include "parallel/shared_reduce.h"
#include "test/support/error_message.h"
#include "test/support/mpi_main.h"

namespace gridnn::parallel {
namespace {

using test::error_message;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::unique_ptr<Communicator> world(const std::string& name = "world") {
  MPI_Comm c;
  GRIDNN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  return make_mpi_communicator(c, name);
}

class MpiComm : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = world();
    P = comm->size();
    me = comm->rank();
    ASSERT_EQ(me, test::world_rank());
    ASSERT_EQ(P, test::world_size());
  }
  std::unique_ptr<Communicator> comm;
  int P = 1, me = 0;
};

TEST_F(MpiComm, AllReduceSumOfRankDependentValues) {
  const int64_t S = int64_t(P) * (P + 1) / 2;  // sum of (rank + 1)
  for (int64_t n : {1, 3, 7, 64}) {            // fewer and more elements than ranks
    std::vector<float> f(static_cast<size_t>(n));
    std::vector<int32_t> i32(static_cast<size_t>(n));
    std::vector<int64_t> i64(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      f[size_t(i)] = float((me + 1) * (i + 1));
      i32[size_t(i)] = int32_t((me + 1) * (i - 3));
      i64[size_t(i)] = (int64_t(me) + 1) * (int64_t(1) << 40) + i;
    }
    Tensor tf = Tensor::from_vector(f, {n});
    Tensor ti = Tensor::from_vector(i32, {n});
    Tensor tl = Tensor::from_vector(i64, {n});
    comm->all_reduce(tf);
    comm->all_reduce(ti);
    comm->all_reduce(tl);
    auto vf = tf.to_vector<float>();
    auto vi = ti.to_vector<int32_t>();
    auto vl = tl.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(vf[size_t(i)], float(S * (i + 1))) << "n " << n << " i " << i;
      EXPECT_EQ(vi[size_t(i)], int32_t(S * (i - 3)));
      EXPECT_EQ(vl[size_t(i)], S * (int64_t(1) << 40) + P * i);
    }
  }
}

TEST_F(MpiComm, AllReduceMax) {
  Tensor t = Tensor::from_vector<float>({float(me), float(-me), float(10 * me + 1)}, {3});
  comm->all_reduce(t, ReduceOp::max);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(P - 1), 0.f, float(10 * (P - 1) + 1)}));
  Tensor ti = Tensor::from_vector<int64_t>({me == P / 2 ? 99 : int64_t(me)}, {1});
  comm->all_reduce(ti, ReduceOp::max);
  EXPECT_EQ(ti.to_vector<int64_t>()[0], 99);
}

TEST_F(MpiComm, AllReduceOfAMultiDimensionalTensorAndAScalar) {
  Tensor t = Tensor::zeros({2, 3, 5});
  float* p = t.data<float>();
  for (int i = 0; i < 30; ++i) p[i] = float(i * (me + 1));
  comm->all_reduce(t);
  auto v = t.to_vector<float>();
  for (int i = 0; i < 30; ++i) EXPECT_EQ(v[size_t(i)], float(i * P * (P + 1) / 2));
  Tensor s = Tensor::from_vector<float>({1.5f}, Shape{});
  comm->all_reduce(s);
  EXPECT_EQ(s.to_vector<float>()[0], 1.5f * float(P));
}

// Sums that are not exact in f32: every rank must hold the same bits, and they must be the
// contributions added in rank order (0, 1, 2, ...), run after run.
TEST_F(MpiComm, AllReduceIsBitwiseIdenticalOnEveryRankAndInRankOrder) {
  const int64_t n = 1001;
  std::mt19937 rng(1234u + unsigned(me));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor mine = Tensor::zeros({n});
  for (int64_t i = 0; i < n; ++i) mine.data<float>()[i] = dist(rng) * (i % 7 == 0 ? 1e6f : 1.f);

  Tensor all = Tensor::zeros({int64_t(P) * n});
  comm->all_gather(mine, all);
  std::vector<float> expected(size_t(n), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    float acc = all.data<float>()[i];
    for (int r = 1; r < P; ++r) acc += all.data<float>()[r * n + i];
    expected[size_t(i)] = acc;
  }

  Tensor a = mine.clone(), b = mine.clone();
  comm->all_reduce(a);
  comm->all_reduce(b);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "not repeatable";
  EXPECT_EQ(std::memcmp(a.raw(), expected.data(), a.nbytes()), 0) << "not the rank-order sum";

  Tensor results = Tensor::zeros({int64_t(P), n});
  comm->all_gather(a.reshape({1, n}), results);
  for (int r = 1; r < P; ++r)
    EXPECT_EQ(std::memcmp(results.narrow(r, 1).raw(), results.narrow(0, 1).raw(), a.nbytes()), 0)
        << "rank " << r << " holds other bits than rank 0";
}

TEST_F(MpiComm, PoliteAndPlainWaitingAgree) {
  for (int mode : {1, 0, -1}) {
    set_mpi_polite_wait(mode);
    Tensor t = Tensor::from_vector<float>({float(me), 1.f}, {2});
    comm->all_reduce(t);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(P * (P - 1) / 2), float(P)})) << "mode " << mode;
    comm->barrier();
  }
  EXPECT_EQ(mpi_polite_wait(), mpi_polite_wait());  // detection is stable
}

// Where every rank shares this node (mpiexec here), all-reduces run through a shared-memory
// window (parallel/shared_reduce.h) unless turned off: both paths give the rank-order
// combination bit for bit, over several chunks of the window's slot, in every type and op.
class SharedReduceTest : public MpiComm {
 protected:
  // The communicator made with the shared path on (1) or off (0).
  static std::unique_ptr<Communicator> made_with(int mode) {
    set_mpi_shared_reduce(mode);
    auto c = world(mode ? "shared" : "messages");
    set_mpi_shared_reduce(-1);
    return c;
  }
};

TEST_F(SharedReduceTest, BothPathsGiveTheRankOrderCombinationBitForBit) {
  auto shared = made_with(1), messages = made_with(0);
  EXPECT_EQ(reduces_through_shared_memory(*shared), P > 1);
  EXPECT_FALSE(reduces_through_shared_memory(*messages));
  const int64_t slot_floats = SharedReduce::kSlotBytes / 4;
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(1001), 2 * slot_floats, 3 * slot_floats + 7}) {
    std::mt19937 rng(77u + unsigned(me) + unsigned(n));
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    Tensor mine = Tensor::zeros({n});
    float* m = mine.data<float>();
    for (int64_t i = 0; i < n; ++i) m[i] = dist(rng) * (i % 5 == 0 ? 1e7f : 1.f);
    Tensor all = Tensor::zeros({int64_t(P) * n});
    comm->all_gather(mine, all);
    std::vector<float> sum(static_cast<size_t>(n)), max(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      sum[size_t(i)] = max[size_t(i)] = all.data<float>()[i];
      for (int r = 1; r < P; ++r) {
        const float x = all.data<float>()[r * n + i];
        sum[size_t(i)] += x;
        max[size_t(i)] = std::max(max[size_t(i)], x);
      }
    }
    for (Communicator* c : {shared.get(), messages.get()}) {
      Tensor s = mine.clone(), x = mine.clone();
      c->all_reduce(s);
      c->all_reduce(x, ReduceOp::max);
      EXPECT_EQ(std::memcmp(s.raw(), sum.data(), s.nbytes()), 0) << c->name() << ": not the rank-order sum, n " << n;
      EXPECT_EQ(std::memcmp(x.raw(), max.data(), x.nbytes()), 0) << c->name() << ": not the maximum, n " << n;
    }
    std::vector<int64_t> l(static_cast<size_t>(n));
    std::vector<int32_t> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      l[size_t(i)] = (int64_t(me) + 1) * (int64_t(1) << 40) - i;
      w[size_t(i)] = int32_t(i % 3 == 0 ? me : -me) * 1000;
    }
    for (Communicator* c : {shared.get(), messages.get()}) {
      Tensor tl = Tensor::from_vector(l, {n}), tw = Tensor::from_vector(w, {n});
      c->all_reduce(tl);
      c->all_reduce(tw, ReduceOp::max);
      const auto vl = tl.to_vector<int64_t>();
      const auto vw = tw.to_vector<int32_t>();
      for (int64_t i = 0; i < n; i += 997) {
        EXPECT_EQ(vl[size_t(i)], int64_t(P) * (P + 1) / 2 * (int64_t(1) << 40) - P * i) << c->name() << " i " << i;
        EXPECT_EQ(vw[size_t(i)], int32_t(i % 3 == 0 ? P - 1 : 0) * 1000) << c->name() << " i " << i;
      }
    }
  }
}

// The window's protocol itself, with slots of a few elements (dozens of chunks a call) and
// rank 1 lagging after every barrier, so that a rank reusing a slot the other still reads
// (or reading one not written yet) would change the sums.
TEST_F(SharedReduceTest, ChunksThroughTinySlotsWithALaggingRank) {
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  MPI_Comm c;
  GRIDNN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  {
    auto window = SharedReduce::make(c, true, /*slot_bytes=*/64);
    ASSERT_TRUE(window);
    const auto barrier = [&] {
      GRIDNN_CHECK_MPI(MPI_Barrier(window->comm()));
      if (me == 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
    };
    for (int64_t n : {int64_t(0), int64_t(3), int64_t(16), int64_t(997)}) {
      std::vector<float> f(static_cast<size_t>(n)), sum(static_cast<size_t>(n));
      std::vector<int64_t> l(static_cast<size_t>(n)), max(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        f[size_t(i)] = float(i % 11) * 0.1f + float(me) * 1e5f;
        l[size_t(i)] = (i * 7 + me * 3) % 13;
        sum[size_t(i)] = float(i % 11) * 0.1f;
        max[size_t(i)] = (i * 7) % 13;  // rank 0's
        for (int r = 1; r < P; ++r) {
          sum[size_t(i)] += float(i % 11) * 0.1f + float(r) * 1e5f;
          max[size_t(i)] = std::max(max[size_t(i)], (i * 7 + r * 3) % 13);
        }
      }
      window->all_reduce(f.data(), n, DType::f32, ReduceOp::sum, barrier);
      window->all_reduce(l.data(), n, DType::i64, ReduceOp::max, barrier);
      EXPECT_EQ(f, sum) << "n " << n;
      EXPECT_EQ(l, max) << "n " << n;
    }
  }
  GRIDNN_CHECK_MPI(MPI_Comm_free(&c));
}

// A started all-reduce through shared memory runs once it or one started after it is waited
// for, always after those started before it, and a blocking all-reduce between does not wait
// for it; the message path's started calls give the same bits.
TEST_F(SharedReduceTest, StartedAllReducesRunInStartOrder) {
  const int64_t n = SharedReduce::kSlotBytes / 4 + 3;  // two chunks
  auto values = [&](int k) {
    Tensor t = Tensor::zeros({n});
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = float(k * 1000 + me) + float(i % 13) * 0.1f;
    return t;
  };
  auto expected = [&](int k) {
    Tensor t = values(k);
    comm->all_reduce(t);
    return t;
  };
  for (int mode : {1, 0}) {
    auto c = made_with(mode);
    Tensor a = values(1), b = values(2), d = values(3), e = values(4), f = values(5);
    auto pa = c->start_all_reduce(a), pb = c->start_all_reduce(b);
    c->all_reduce(d);
    if (mode == 1 && P > 1) {  // deferred until waited for
      EXPECT_FALSE(pa->test());
      EXPECT_FALSE(pb->test());
    }
    pb->wait();  // runs a first
    if (mode == 1 && P > 1) {
      EXPECT_TRUE(pa->test());
    }
    auto pe = c->start_all_reduce(e), pf = c->start_all_reduce(f);
    pf->wait();  // out of start order
    if (mode == 1 && P > 1) {
      EXPECT_TRUE(pe->test());
    }
    for (auto* p : {pa.get(), pb.get(), pe.get()})
      if (p) p->wait();
    for (auto [t, k] : {std::pair{&a, 1}, {&b, 2}, {&d, 3}, {&e, 4}, {&f, 5}})
      EXPECT_EQ(std::memcmp(t->raw(), expected(k).raw(), t->nbytes()), 0) << c->name() << ": call " << k;
  }
}

// Ranks may wait for their started all-reduces in different orders, let one complete by its
// destruction, and start one of nothing: each still gets the rank-order sums.
TEST_F(SharedReduceTest, StartedAllReducesWaitedInRankDependentOrders) {
  auto c = made_with(1);
  auto values = [&](int k) {
    Tensor t = Tensor::zeros({1000});
    for (int64_t i = 0; i < 1000; ++i) t.data<float>()[i] = float(k + me) * 0.25f + float(i);
    return t;
  };
  auto expected = [&](int k) {
    Tensor t = values(k);
    comm->all_reduce(t);
    return t;
  };
  Tensor a = values(1), b = values(2), d = values(3), empty = Tensor::zeros({0});
  {
    auto pa = c->start_all_reduce(a);
    auto pe = c->start_all_reduce(empty);
    auto pb = c->start_all_reduce(b);
    auto pd = c->start_all_reduce(d);
    if (me % 2 == 0) {
      pb->wait();
      pa->wait();
    } else {
      pa->wait();
      pb->wait();
    }
    if (pe) pe->wait();
  }  // d completes as its call is destroyed
  for (auto [t, k] : {std::pair{&a, 1}, {&b, 2}, {&d, 3}})
    EXPECT_EQ(std::memcmp(t->raw(), expected(k).raw(), t->nbytes()), 0) << "call " << k;
}

TEST_F(MpiComm, AllGatherStacksInRankOrder) {
  Tensor in = Tensor::zeros({2, 3});
  for (int i = 0; i < 6; ++i) in.data<float>()[i] = float(100 * me + i);
  Tensor out = Tensor::zeros({2 * int64_t(P), 3});
  comm->all_gather(in, out);
  auto v = out.to_vector<float>();
  for (int r = 0; r < P; ++r)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(v[size_t(6 * r + i)], float(100 * r + i));
  // In place: the input is this rank's block of the output.
  Tensor buf = Tensor::zeros({int64_t(P), 2});
  buf.data<float>()[2 * me] = float(me);
  buf.data<float>()[2 * me + 1] = float(-me);
  comm->all_gather(buf.narrow(me, 1), buf);
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(buf.to_vector<float>()[size_t(2 * r)], float(r));
    EXPECT_EQ(buf.to_vector<float>()[size_t(2 * r + 1)], float(-r));
  }
}

TEST_F(MpiComm, AllGathervWithUnevenAndEmptyBlocks) {
  std::vector<int64_t> rows(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) rows[size_t(r)] = (r + 2) % 3;  // 2, 0, 1, 2: uneven, one empty
  int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t(0));
  Tensor in = Tensor::zeros({rows[size_t(me)], 2}, DType::i32);
  for (int64_t i = 0; i < in.numel(); ++i) in.data<int32_t>()[i] = int32_t(10 * me + i);
  Tensor out = Tensor::zeros({total, 2}, DType::i32);
  comm->all_gatherv(in, out, rows);
  auto v = out.to_vector<int32_t>();
  size_t k = 0;
  for (int r = 0; r < P; ++r)
    for (int64_t i = 0; i < 2 * rows[size_t(r)]; ++i) EXPECT_EQ(v[k++], int32_t(10 * r + i)) << r << " " << i;
}

TEST_F(MpiComm, HalfTypesMoveByteForByte) {
  Tensor in = Tensor::zeros({1, 2}, DType::bf16);
  in.data<bf16>()[0] = bf16(float(me) + 0.5f);
  in.data<bf16>()[1] = bf16(-3.25f);
  Tensor out = Tensor::zeros({int64_t(P), 2}, DType::bf16);
  comm->all_gather(in, out);
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(float(out.data<bf16>()[2 * r]), float(r) + 0.5f);
    EXPECT_EQ(float(out.data<bf16>()[2 * r + 1]), -3.25f);
  }
  Tensor h = Tensor::zeros({3}, DType::f16);
  for (int i = 0; i < 3; ++i) h.data<f16>()[i] = f16(float(me * 3 + i));
  comm->broadcast(h, P - 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(float(h.data<f16>()[i]), float((P - 1) * 3 + i));
}

TEST_F(MpiComm, ReduceScatterSumsBlockRankOfEveryRank) {
  const int64_t rows = 2, cols = 3;
  Tensor in = Tensor::zeros({int64_t(P) * rows, cols});
  for (int64_t j = 0; j < in.size(0); ++j)
    for (int64_t c = 0; c < cols; ++c) in.data<float>()[j * cols + c] = float(me + 10 * j + 100 * c);
  Tensor out = Tensor::zeros({rows, cols});
  comm->reduce_scatter(in, out);
  auto v = out.to_vector<float>();
  const int S0 = P * (P - 1) / 2;
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(v[size_t(j * cols + c)], float(S0 + P * (10 * (me * rows + j) + 100 * c))) << j << " " << c;
}

TEST_F(MpiComm, ReduceScattervWithUnevenBlocks) {
  std::vector<int64_t> rows(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) rows[size_t(r)] = r % 2 == 0 ? 2 : 1;
  int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t(0));
  int64_t first = std::accumulate(rows.begin(), rows.begin() + me, int64_t(0));
  Tensor in = Tensor::zeros({total, 2}, DType::i64);
  for (int64_t i = 0; i < in.numel(); ++i) in.data<int64_t>()[i] = (me + 1) * 1000 + i;
  Tensor out = Tensor::zeros({rows[size_t(me)], 2}, DType::i64);
  comm->reduce_scatterv(in, out, rows);
  auto v = out.to_vector<int64_t>();
  const int64_t S = int64_t(P) * (P + 1) / 2;
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(v[size_t(i)], S * 1000 + P * (first * 2 + i));
}

TEST_F(MpiComm, ReduceScatterIsTheBlockOfTheAllReduce) {
  Tensor in = Tensor::zeros({int64_t(P) * 3});
  std::mt19937 rng(99u + unsigned(me));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = dist(rng);
  Tensor out = Tensor::zeros({3});
  comm->reduce_scatter(in, out);
  Tensor full = in.clone();
  comm->all_reduce(full);
  EXPECT_EQ(std::memcmp(out.raw(), full.narrow(me * 3, 3).raw(), out.nbytes()), 0);
}

TEST_F(MpiComm, BroadcastFromTheLastRank) {
  const int root = P - 1;
  Tensor t = Tensor::from_vector<int32_t>({me, 2 * me, 7}, {3});
  comm->broadcast(t, root);
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{root, 2 * root, 7}));
  Tensor f = Tensor::from_vector<float>({float(me)}, {1});
  comm->broadcast(f, 0);
  EXPECT_EQ(f.to_vector<float>()[0], 0.f);
}

TEST_F(MpiComm, SendRecvAroundARing) {
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  Tensor send = Tensor::from_vector<float>({float(me), float(me * me)}, {2});
  Tensor recv = Tensor::zeros({2});
  comm->send_recv(send, next, recv, prev, 5);
  EXPECT_EQ(recv.to_vector<float>(), (std::vector<float>{float(prev), float(prev * prev)}));
  // Backwards around the ring, sending from and receiving into the same tensor.
  Tensor both = Tensor::from_vector<float>({float(me), 0.f}, {2});
  comm->send_recv(both, prev, both, next, 6);
  EXPECT_EQ(both.to_vector<float>()[0], float(next));
}

TEST_F(MpiComm, SendRecvAlongAChainWithMissingSides) {
  // 0 -> 1 -> ... -> P-1: the first rank receives nothing, the last sends nothing.
  const int dest = me + 1 < P ? me + 1 : -1;
  const int source = me > 0 ? me - 1 : -1;
  Tensor send = Tensor::from_vector<int64_t>({int64_t(me) * 11}, {1});
  Tensor recv = Tensor::from_vector<int64_t>({-1}, {1});
  comm->send_recv(send, dest, recv, source, 0);
  EXPECT_EQ(recv.to_vector<int64_t>()[0], source == -1 ? -1 : int64_t(source) * 11);
  // An undefined tensor also skips its side.
  if (P == 1) return;
  Tensor none;
  if (me == 0) comm->send_recv(send, P - 1, none, 0, 3);
  if (me == P - 1) {
    comm->send_recv(none, 0, recv, 0, 3);
    EXPECT_EQ(recv.to_vector<int64_t>()[0], 0);
  }
}

TEST_F(MpiComm, SendRecvOfTheWrongSizeFailsOnTheReceiver) {
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  Tensor none;
  if (me == 0) comm->send_recv(Tensor::zeros({2}), 1, none, -1, 9);
  if (me == 1) {
    Tensor recv = Tensor::zeros({3});
    std::string m = error_message([&] { comm->send_recv(none, -1, recv, 0, 9); });
    EXPECT_TRUE(contains(m, "send_recv on communicator \"world\"")) << m;
    EXPECT_TRUE(contains(m, "received 8 bytes from rank 0")) << m;
  }
  comm->barrier();
}

// Argument errors are thrown on every rank before any message moves, so no rank hangs.
TEST_F(MpiComm, BadArgumentsThrowNamingCommunicatorAndOperation) {
  Tensor in = Tensor::zeros({2, 3});
  Tensor out = Tensor::zeros({2 * int64_t(P) + 1, 3});
  std::string m = error_message([&] { comm->all_gather(in, out); });
  EXPECT_TRUE(contains(m, "all_gather on communicator \"world\"")) << m;
  EXPECT_TRUE(contains(m, "must have " + std::to_string(2 * P) + " rows")) << m;
  Tensor h = Tensor::zeros({int64_t(P)}, DType::f16);
  Tensor h1 = Tensor::zeros({1}, DType::f16);
  m = error_message([&] { comm->reduce_scatter(h, h1); });
  EXPECT_TRUE(contains(m, "reduce_scatter on communicator \"world\"")) << m;
  EXPECT_TRUE(contains(m, "cannot reduce f16")) << m;
  m = error_message([&] { comm->all_reduce(h1); });
  EXPECT_TRUE(contains(m, "cannot reduce f16")) << m;
  m = error_message([&] { comm->broadcast(in, P); });
  EXPECT_TRUE(contains(m, "broadcast on communicator \"world\"")) << m;
  m = error_message([&] { comm->all_gatherv(in, out, {1}); });
  EXPECT_TRUE(P == 1 ? contains(m, "must have 1 rows") : contains(m, "one per rank")) << m;
  Tensor none;
  m = error_message([&] { comm->send_recv(in, P, none, -1, 0); });
  EXPECT_TRUE(contains(m, "destination rank " + std::to_string(P) + " is outside")) << m;
  m = error_message([&] { comm->send_recv(in, 0, none, -1, -4); });
  EXPECT_TRUE(contains(m, "tag -4")) << m;
  comm->barrier();
}

TEST_F(MpiComm, EveryCallIsCountedWithItsLayer) {
  comm_log().clear();
  auto named = world("col");
  {
    CommLayerScope scope("fc1");
    Tensor t = Tensor::zeros({10});
    named->all_reduce(t);
    Tensor in = Tensor::zeros({2, 3}), out = Tensor::zeros({2 * int64_t(P), 3});
    named->all_gather(in, out);
    named->reduce_scatter(out, in);
    {
      CommLayerScope inner("fc1.bias");
      named->broadcast(t, 0);
    }
    named->send_recv(t, (me + 1) % P, t, (me + P - 1) % P, 1);
    named->barrier();
  }
  EXPECT_EQ(comm_log().elements("col", "all_reduce", "fc1"), 10);
  EXPECT_EQ(comm_log().elements("col", "all_gather", "fc1"), 6);
  EXPECT_EQ(comm_log().elements("col", "reduce_scatter", "fc1"), 6 * P);
  EXPECT_EQ(comm_log().elements("col", "broadcast", "fc1.bias"), 10);
  EXPECT_EQ(comm_log().elements("col", "broadcast", "fc1"), 0);
  EXPECT_EQ(comm_log().elements("col", "send_recv"), 10);
  EXPECT_EQ(comm_log().elements("world", ""), 0);
  ASSERT_EQ(comm_log().records().size(), 6u);
  EXPECT_EQ(comm_log().records()[0].bytes, 40);
  EXPECT_EQ(comm_log().records()[5].op, "barrier");
  std::string report = comm_log().report();
  EXPECT_TRUE(contains(report, "fc1.bias")) << report;
  EXPECT_TRUE(contains(report, "reduce_scatter")) << report;
  comm_log().clear();
}

TEST(MpiCommunicatorFactory, RefusesTheWorldItself) {
  std::string m = error_message([] { make_mpi_communicator(MPI_COMM_WORLD, "world"); });
  EXPECT_TRUE(contains(m, "MPI_Comm_dup")) << m;
}

TEST(MpiCommunicatorDevice, StagesDeviceTensorsThroughTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto comm = world();
  const int P = comm->size(), me = comm->rank();
  Tensor t = Tensor::from_vector<float>({float(me), 1.f}, {2}).to(Device::cuda());
  comm->all_reduce(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(P * (P - 1) / 2), float(P)}));
  Tensor in = Tensor::from_vector<float>({float(me)}, {1}).to(Device::cuda());
  Tensor out = Tensor::zeros({int64_t(P)}, DType::f32, Device::cuda());
  comm->all_gather(in, out);
  for (int r = 0; r < P; ++r) EXPECT_EQ(out.to_vector<float>()[size_t(r)], float(r));
}

}  // namespace
}  // namespace gridnn::parallel
