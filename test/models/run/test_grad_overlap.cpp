// Gradient synchronization overlapping backward (docs/design.md §4), under mpiexec -n 1, 2, 4:
// Communicator::start_all_reduce gives bitwise the result of all_reduce, with several in
// flight and blocking collectives in between; and on every grid of the job's size, a
// training step whose buckets are all-reduced while backward runs (the default) leaves
// bitwise the gradients of the blocking GradientSync::reduce(), with every bucket started
// before backward ended; from the second step on the buckets follow the order backward
// finishes the parameters, and start one after the other.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "models/run/pipelined_model.h"
#include "parallel/process_grid.h"
#include "test/support/grid_invariance.h"
#include "test/support/mpi_main.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

// Values that differ by rank and position and do not add up exactly in fp32.
Tensor ramp(int64_t n, int rank) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(std::sin(0.37 * double(i) + 1.3 * rank)) * 1e3f / float(i + 1);
  return Tensor::from_vector(v, Shape{n});
}

TEST(GradOverlap, StartAllReduceIsBitwiseAllReduce) {
  auto grid = parallel::ProcessGrid::create({1, test::world_size(), 1});
  parallel::Communicator& comm = grid->world();
  const int rank = comm.rank();
  const std::vector<int64_t> sizes = {0, 1, 3, 1000, 100003, 7};
  std::vector<Tensor> blocking, overlapped;
  for (int64_t n : sizes) {
    blocking.push_back(ramp(n, rank));
    overlapped.push_back(ramp(n, rank));
  }
  for (Tensor& t : blocking) comm.all_reduce(t);
  parallel::comm_log().clear();
  std::vector<std::unique_ptr<parallel::PendingCall>> pending;
  {
    parallel::CommLayerScope scope("overlapped");
    for (size_t i = 0; i < sizes.size(); ++i) {
      pending.push_back(comm.start_all_reduce(overlapped[i]));
      parallel::CommLayerScope between("between");
      Tensor other = ramp(5, rank);  // a blocking collective on the same group in between
      comm.all_reduce(other);
      pending.back()->test();
    }
  }
  for (size_t i = pending.size(); i-- > 0;) pending[i]->wait();  // any order
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(pending[i]->test());
    EXPECT_TRUE(test::tensors_equal(overlapped[i], blocking[i])) << "size " << sizes[i];
  }
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  EXPECT_EQ(parallel::comm_log().elements("world", "all_reduce", "overlapped"), total);
}

train::TrainOptions tiny() {
  train::TrainOptions o;
  o.resattnet.width = 2;
  o.classes = 3;
  o.input = {24, 24, 20};
  o.batch = 8;
  o.data.augment = false;
  o.progress = false;
  return o;
}

// Every parameter's gradient, copied (named_parameters order).
std::vector<Tensor> gradients(run::PipelinedModel& net) {
  std::vector<Tensor> out;
  for (auto& [name, p] : net.model().named_parameters()) out.push_back(p->grad.clone());
  return out;
}

TEST(GradOverlap, OverlappedGradientsAreBitwiseTheBlockingOnes) {
  const int n = test::world_size();
  for (int rows = 1; rows <= n; ++rows) {
    if (n % rows) continue;
    const parallel::GridShape shape{1, rows, n / rows};
    auto grid = parallel::ProcessGrid::create(shape);
    const auto o = tiny();
    run::PipelinedModel net(o, *grid);
    const data::Batch batch = test::tiny_batch_shard(*grid);
    constexpr int64_t kBucketBytes = 1024;  // many buckets of the tiny net

    Tensor logits;
    net.set_gradient_sync(false, kBucketBytes);
    net.forward_backward(batch, 8, &logits);
    const std::vector<Tensor> blocking = gradients(net);

    for (int repeat = 0; repeat < 2; ++repeat) {
      net.set_gradient_sync(true, kBucketBytes);
      net.forward_backward(batch, 8, &logits);
      const run::GradientSync& sync = net.gradient_sync();
      if (n > 1) {
        EXPECT_GT(sync.buckets(), 2) << shape.str();
      }
      // Overlap really happened: every bucket started while backward ran.
      EXPECT_EQ(sync.buckets_started_in_backward(), sync.buckets()) << shape.str();
      size_t i = 0;
      for (auto& [name, p] : net.model().named_parameters())
        EXPECT_TRUE(test::tensors_equal(p->grad, blocking[i++])) << shape.str() << ": grad." << name;
    }
  }
}

// A residual block runs its downsample after the main branch but registers it last, so in
// reverse registration order the bucket holding the downsample and bn2 starts after the
// one holding conv2. After the first overlapped step, the buckets are rebuilt in the
// order the parameters became ready: they start in index order, and the gradients stay
// bitwise those of the blocking sync.
TEST(GradOverlap, BucketsFollowBackwardOrderAfterTheFirstStep) {
  const int n = test::world_size();
  if (n == 1) GTEST_SKIP() << "one process synchronizes nothing";
  for (int rows : {1, n}) {
    const parallel::GridShape shape{1, rows, n / rows};
    auto grid = parallel::ProcessGrid::create(shape);
    const auto o = tiny();
    run::PipelinedModel net(o, *grid);
    const data::Batch batch = test::tiny_batch_shard(*grid);
    constexpr int64_t kBucketBytes = 1024;

    Tensor logits;
    net.set_gradient_sync(false, kBucketBytes);
    net.forward_backward(batch, 8, &logits);
    const std::vector<Tensor> blocking = gradients(net);

    net.set_gradient_sync(true, kBucketBytes);
    const run::GradientSync& sync = net.gradient_sync();
    for (int step = 0; step < 3; ++step) {
      net.forward_backward(batch, 8, &logits);  // step 1 starts with the rebuilt buckets
      std::vector<int64_t> in_order(size_t(sync.buckets()));
      for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = int64_t(i);
      ASSERT_EQ(sync.start_order().size(), in_order.size()) << shape.str();
      EXPECT_EQ(sync.buckets_started_in_backward(), sync.buckets()) << shape.str();
      if (step > 0) {
        EXPECT_EQ(sync.start_order(), in_order) << shape.str() << " step " << step;
      } else if (rows == 1) {  // (on n x 1 only the few split layers before the hand-over sync)
        EXPECT_NE(sync.start_order(), in_order) << shape.str() << ": the first step should start out of order";
      }
      size_t i = 0;
      for (auto& [name, p] : net.model().named_parameters())
        EXPECT_TRUE(test::tensors_equal(p->grad, blocking[i++]))
            << shape.str() << " step " << step << ": grad." << name;
    }
  }
}

// Each synced gradient is a view of its bucket, the bucket's parameters one after another,
// each in whole 256-byte units (so every gradient is 256-byte aligned after 1-float ones), before
// and after the buckets are rebuilt in backward's order; a gradient replaced by another
// tensor (as Module::to replaces it) is copied in and bound again, and the step's gradients
// stay bitwise those of the blocking sync.
TEST(GradOverlap, GradientsAreViewsOfTheirBuckets) {
  const int n = test::world_size();
  if (n == 1) GTEST_SKIP() << "one process synchronizes nothing";
  const parallel::GridShape shape{1, 1, n};
  auto grid = parallel::ProcessGrid::create(shape);
  run::PipelinedModel net(tiny(), *grid);
  const data::Batch batch = test::tiny_batch_shard(*grid);
  Tensor logits;
  net.set_gradient_sync(false, 1024);
  net.forward_backward(batch, 8, &logits);
  const std::vector<Tensor> blocking = gradients(net);
  net.set_gradient_sync(true, 1024);
  const run::GradientSync& sync = net.gradient_sync();
  const auto expect_bound = [&](const std::string& when) {
    ASSERT_GT(sync.buckets(), 2) << when;
    for (int64_t b = 0; b < sync.buckets(); ++b) {
      const char* at = static_cast<const char*>(sync.bucket_gradients(b).raw());
      for (const nn::Parameter* p : sync.bucket_parameters(b)) {
        EXPECT_EQ(static_cast<const char*>(p->grad.raw()), at) << when << ", bucket " << b;
        at += (p->grad.nbytes() + 255) / 256 * 256;
      }
    }
  };
  expect_bound("built");
  for (int step = 0; step < 3; ++step) {
    if (step == 2) {  // replace one synced gradient (the step zeroes it first)
      nn::Parameter* p = sync.bucket_parameters(1).front();
      p->grad = Tensor::empty(p->value.shape());
      ops::fill(p->grad, 7.0);
    }
    net.forward_backward(batch, 8, &logits);
    expect_bound("after step " + std::to_string(step));
    size_t i = 0;
    for (auto& [name, p] : net.model().named_parameters())
      EXPECT_TRUE(test::tensors_equal(p->grad, blocking[i++])) << "step " << step << ": grad." << name;
  }
}

}  // namespace
}  // namespace gridnn
