// BatchNorm3d's contracts the op harness does not express (the layer's and the ops' values
// against double loops, the running statistics after two steps, central-difference gradients
// in both modes and the CUDA backend are cases of test/ops/cases_batchnorm.cpp): names and
// initial values, evaluation leaving the running statistics alone, accumulation of the
// parameter gradients, summing over split batches as a distributed run does, determinism,
// the same bits on one and two threads, the order of kernels/batchnorm_bodies.h that the CUDA
// backend follows too, and the errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/safetensors.h"
#include "kernels/batchnorm.h"
#include "kernels/elementwise.h"
#include "models/layers/activation.h"
#include "models/layers/batchnorm3d.h"
#include "test/ops/reference_conv_pool_norm.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

// The references, in double: test/ops/reference_conv_pool_norm.h (shared with the op
// harness). Per-channel mean and biased variance of x [N, C, ...]:
using RefStats = test::BatchNormStats;
using test::from_doubles;
constexpr auto reference_stats = &test::reference_batchnorm_stats;

std::vector<double> values(const Tensor& t) { return test::to_doubles(t); }

// Weight and bias away from 1 and 0 so that they matter.
void set_affine(nn::BatchNorm3d& bn, uint64_t seed) {
  const int64_t c = bn.num_features();
  bn.weight().value.copy_from(test::random_tensor({c}, seed, 0.5f, 2.0f));
  bn.bias().value.copy_from(test::random_tensor({c}, seed + 1, -1.0f, 1.0f));
}

TEST(BatchNorm3d, NamesShapesAndInitialValuesFollowPyTorch) {
  nn::BatchNorm3d bn(3);
  auto params = bn.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  auto buffers = bn.named_buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].first, "running_mean");
  EXPECT_EQ(buffers[1].first, "running_var");
  EXPECT_EQ(buffers[2].first, "num_batches_tracked");
  EXPECT_EQ(bn.num_batches_tracked().shape(), Shape{});
  EXPECT_EQ(bn.num_batches_tracked().dtype(), DType::i64);
  EXPECT_EQ(bn.num_batches_tracked().to_vector<int64_t>(), std::vector<int64_t>{0});
  EXPECT_EQ(values(bn.weight().value), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(values(bn.bias().value), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(bn.running_mean()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(bn.running_var()), (std::vector<double>{1, 1, 1}));
}

TEST(BatchNorm3d, EvalLeavesTheRunningStatisticsAlone) {
  Shape s{2, 3, 3, 2, 3};
  nn::BatchNorm3d bn(3);
  set_affine(bn, 10);
  bn.running_mean().copy_from(test::random_tensor({3}, 11, -1.0f, 1.0f));
  bn.running_var().copy_from(test::random_tensor({3}, 12, 0.5f, 2.0f));
  Tensor rm = bn.running_mean().clone(), rv = bn.running_var().clone();
  bn.eval();
  bn.forward(test::random_tensor(s, 13));
  EXPECT_TRUE(test::tensors_equal(bn.running_mean(), rm));
  EXPECT_TRUE(test::tensors_equal(bn.running_var(), rv));
  EXPECT_EQ(bn.num_batches_tracked().to_vector<int64_t>(), std::vector<int64_t>{0});
  // One value per channel is fine in evaluation.
  EXPECT_NO_THROW(bn.forward(test::random_tensor({1, 3, 1, 1, 1}, 14)));
}

TEST(BatchNorm3d, ParameterGradientsAccumulate) {
  Shape s{2, 3, 3, 2, 3};
  nn::BatchNorm3d bn(3);
  set_affine(bn, 15);
  Tensor x = test::random_tensor(s, 16), dy = test::random_tensor(s, 17);
  RefStats st = reference_stats(x);
  const std::vector<double> invstd = test::reference_batchnorm_invstd(st.var, 1e-5);
  const std::vector<double> sums = test::reference_batchnorm_backward_sums(x, dy, st.mean, invstd);
  std::vector<double> twice_sdy(sums.begin(), sums.begin() + 3);
  for (double& v : twice_sdy) v *= 2;
  for (int step = 0; step < 2; ++step) {
    bn.forward(x);
    bn.backward(dy);
  }
  EXPECT_TRUE(test::tensors_close(bn.bias().grad, from_doubles(twice_sdy, {3}), {1e-5, 1e-5}));
}

// The fused ReLU is the two layers bit for bit (output, input gradient, parameter gradients,
// running statistics), in training and evaluation, while it keeps only its input.
TEST(BatchNorm3d, FusedReluIsBatchNormThenReluBitForBit) {
  const Shape s{2, 3, 4, 3, 5};
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "evaluation");
    nn::BatchNorm3d fused(3, 1e-5, 0.1, Device::cpu(), nullptr, ops::BnActivation::relu), bn(3);
    nn::ReLU relu;
    for (nn::BatchNorm3d* m : {&fused, &bn}) {
      set_affine(*m, 20);
      m->running_var().copy_from(test::random_tensor({3}, 21, 0.5f, 2.0f));
      if (!training) m->eval();
    }
    const Tensor x = test::random_tensor(s, 22), dy = test::random_tensor(s, 23);
    const Tensor y = fused.forward(x);
    const Tensor y_ref = relu.forward(bn.forward(x));
    EXPECT_TRUE(test::tensors_equal(y, y_ref));
    const std::vector<double> out = test::to_doubles(y);
    const auto zeros = std::count(out.begin(), out.end(), 0.0);
    EXPECT_GT(zeros, 0);  // the gate both closes and opens
    EXPECT_LT(zeros, std::ptrdiff_t(out.size()));
    const Tensor dx = fused.backward(dy);
    const Tensor dx_ref = bn.backward(relu.backward(dy));
    EXPECT_TRUE(test::tensors_equal(dx, dx_ref));
    EXPECT_TRUE(test::tensors_equal(fused.weight().grad, bn.weight().grad));
    EXPECT_TRUE(test::tensors_equal(fused.bias().grad, bn.bias().grad));
    EXPECT_TRUE(test::tensors_equal(fused.running_mean(), bn.running_mean()));
    EXPECT_TRUE(test::tensors_equal(fused.running_var(), bn.running_var()));
  }
}

// dx is written over dy exactly when the caller gives dy up (moves its only handle), and is
// the same either way.
TEST(BatchNorm3d, TheGradientIsWrittenOverDyOnlyWhenGivenUp) {
  const Shape s{2, 3, 2, 3, 2};
  nn::BatchNorm3d bn(3, 1e-5, 0.1, Device::cpu(), nullptr, ops::BnActivation::relu);
  set_affine(bn, 30);
  const Tensor x = test::random_tensor(s, 31);
  Tensor dy = test::random_tensor(s, 32);
  const Tensor dy_values = dy.clone();
  bn.forward(x);
  const Tensor kept = bn.backward(dy);  // dy is still the caller's
  EXPECT_FALSE(kept.shares_storage_with(dy));
  EXPECT_TRUE(test::tensors_equal(dy, dy_values));
  bn.forward(x);
  const void* storage = dy.raw();
  const Tensor given = bn.backward(std::move(dy));
  EXPECT_EQ(given.raw(), storage);
  EXPECT_TRUE(test::tensors_equal(given, kept));
}

TEST(BatchNorm3d, SumsOfSplitBatchesAddUpLikeAnAllReduce) {
  // Two "ranks" holding halves of the batch: their channel sums added equal the sums of
  // the whole batch (what the distributed layer relies on), up to float rounding.
  Shape s{4, 3, 2, 3, 3};
  Tensor x = test::random_tensor(s, 24, -1.0f, 3.0f), dy = test::random_tensor(s, 25);
  Tensor shift = test::random_tensor({3}, 26), invstd = test::random_tensor({3}, 27, 0.5f, 1.5f);
  Tensor whole = Tensor::empty({2, 3}), a = Tensor::empty({2, 3}), b = Tensor::empty({2, 3});
  ops::batchnorm_channel_sums(x, shift, whole);
  ops::batchnorm_channel_sums(x.narrow(0, 2).clone(), shift, a);
  ops::batchnorm_channel_sums(x.narrow(2, 2).clone(), shift, b);
  ops::add(a, b, a);
  EXPECT_TRUE(test::tensors_close(a, whole, {1e-5, 1e-6}));
  ops::batchnorm_backward_sums(x, dy, shift, invstd, whole);
  ops::batchnorm_backward_sums(x.narrow(0, 2).clone(), dy.narrow(0, 2).clone(), shift, invstd, a);
  ops::batchnorm_backward_sums(x.narrow(2, 2).clone(), dy.narrow(2, 2).clone(), shift, invstd, b);
  ops::add(a, b, a);
  EXPECT_TRUE(test::tensors_close(a, whole, {1e-5, 1e-6}));
}

// Two "ranks" as two threads, each holding half of the batch, with an all-reduce over
// shared memory: what the distributed layer of docs/design.md §4 does through the two hooks.
class SharedAllReduce {
 public:
  void all_reduce(Tensor& t) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    // f32 sums, and the i64 values-per-channel count (exact in a double at these sizes).
    std::vector<double> v;
    if (t.dtype() == DType::i64) {
      for (int64_t x : t.to_vector<int64_t>()) v.push_back(double(x));
    } else {
      for (float x : t.to_vector<float>()) v.push_back(double(x));
    }
    if (arrived_ == 0) sum_.assign(v.size(), 0.0);
    for (size_t i = 0; i < v.size(); ++i)  // two addends: the same in either order
      sum_[i] = t.dtype() == DType::i64 ? sum_[i] + v[i] : double(float(sum_[i]) + float(v[i]));
    if (++arrived_ == kRanks) {
      arrived_ = 0;
      ++generation_;
      result_ = sum_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return generation_ != generation; });
    }
    if (t.dtype() == DType::i64) {
      std::vector<int64_t> r;
      for (double x : result_) r.push_back(int64_t(x));
      t.copy_from(Tensor::from_vector(r, t.shape()));
    } else {
      std::vector<float> r;
      for (double x : result_) r.push_back(float(x));
      t.copy_from(Tensor::from_vector(r, t.shape()));
    }
  }
  static constexpr int kRanks = 2;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int arrived_ = 0, generation_ = 0;
  std::vector<double> sum_, result_;
};

// Rank `rank` of the threads sharing `shared`: a communicator that can all-reduce.
class ThreadCommunicator : public parallel::Communicator {
 public:
  ThreadCommunicator(SharedAllReduce& shared, int rank)
      : Communicator("stage", rank, SharedAllReduce::kRanks), shared_(shared) {}

 protected:
  void do_all_reduce(Tensor& t, parallel::ReduceOp) override { shared_.all_reduce(t); }
  void do_all_gather(const Tensor&, Tensor&) override { unused(); }
  void do_all_gatherv(const Tensor&, Tensor&, const std::vector<int64_t>&) override { unused(); }
  void do_reduce_scatter(const Tensor&, Tensor&) override { unused(); }
  void do_reduce_scatterv(const Tensor&, Tensor&, const std::vector<int64_t>&) override { unused(); }
  void do_broadcast(Tensor&, int) override { unused(); }
  void do_send_recv(const Tensor*, int, Tensor*, int, int) override { unused(); }
  void do_barrier() override { unused(); }

 private:
  [[noreturn]] static void unused() { throw Error("batch norm only all-reduces"); }
  SharedAllReduce& shared_;
};

TEST(BatchNorm3d, SplitBatchWithAllReducedSumsMatchesTheWholeBatch) {
  Shape s{4, 3, 3, 2, 3};
  Tensor x = test::random_tensor(s, 40, -1.0f, 3.0f), dy = test::random_tensor(s, 41);
  nn::BatchNorm3d whole(3);
  set_affine(whole, 42);
  Tensor y = whole.forward(x), dx = whole.backward(dy);

  SharedAllReduce shared;
  ThreadCommunicator rank0(shared, 0), rank1_comm(shared, 1);
  nn::BatchNorm3d a(3, 1e-5, 0.1, Device::cpu(), &rank0), b(3, 1e-5, 0.1, Device::cpu(), &rank1_comm);
  set_affine(a, 42);
  set_affine(b, 42);
  Tensor ya, yb, dxa, dxb;
  std::thread rank1([&] {
    ya = a.forward(x.narrow(0, 2).clone());
    dxa = a.backward(dy.narrow(0, 2).clone());
  });
  yb = b.forward(x.narrow(2, 2).clone());
  dxb = b.backward(dy.narrow(2, 2).clone());
  rank1.join();

  EXPECT_TRUE(test::tensors_close(ya, y.narrow(0, 2), {1e-5, 1e-5}));
  EXPECT_TRUE(test::tensors_close(yb, y.narrow(2, 2), {1e-5, 1e-5}));
  EXPECT_TRUE(test::tensors_close(dxa, dx.narrow(0, 2), {1e-5, 1e-5}));
  EXPECT_TRUE(test::tensors_close(dxb, dx.narrow(2, 2), {1e-5, 1e-5}));
  EXPECT_TRUE(test::tensors_close(a.running_mean(), whole.running_mean(), {1e-6, 1e-6}));
  EXPECT_TRUE(test::tensors_close(b.running_var(), whole.running_var(), {1e-6, 1e-6}));
  // Each rank adds its own share of the parameter gradients; the shares sum to the whole.
  Tensor gw = a.weight().grad.clone(), gb = a.bias().grad.clone();
  ops::add(gw, b.weight().grad, gw);
  ops::add(gb, b.bias().grad, gb);
  EXPECT_TRUE(test::tensors_close(gw, whole.weight().grad, {1e-5, 1e-5}));
  EXPECT_TRUE(test::tensors_close(gb, whole.bias().grad, {1e-5, 1e-5}));
}

TEST(BatchNorm3d, StatisticsAreDeterministic) {
  Tensor x = test::random_tensor({2, 2, 17, 19, 23}, 28);  // not a multiple of the lanes
  Tensor a = Tensor::empty({2, 2}), b = Tensor::empty({2, 2});
  ops::batchnorm_channel_sums(x, Tensor(), a);
  ops::batchnorm_channel_sums(x, Tensor(), b);
  EXPECT_TRUE(test::tensors_equal(a, b));
  const std::vector<double> ref = test::reference_batchnorm_channel_sums(x, {});
  EXPECT_TRUE(test::tensors_close(a, from_doubles(ref, {2, 2}), {1e-4, 1e-6}));
}

// The three sums of kernels/batchnorm.h on one input: statistics with and without a shift,
// and the backward sums.
struct AllSums {
  Tensor plain, shifted, backward;
};

AllSums all_sums(const Tensor& x, const Tensor& dy, const Tensor& shift, const Tensor& invstd) {
  const int64_t c = x.size(1);
  AllSums r{Tensor::empty({2, c}), Tensor::empty({2, c}), Tensor::empty({2, c})};
  ops::batchnorm_channel_sums(x, Tensor(), r.plain);
  ops::batchnorm_channel_sums(x, shift, r.shifted);
  ops::batchnorm_backward_sums(x, dy, shift, invstd, r.backward);
  return r;
}

void expect_same_bits(const AllSums& a, const AllSums& b) {
  EXPECT_TRUE(test::tensors_equal(a.plain, b.plain));
  EXPECT_TRUE(test::tensors_equal(a.shifted, b.shifted));
  EXPECT_TRUE(test::tensors_equal(a.backward, b.backward));
}

// Values of either sign spread over 2^-30 .. 2^30, each plane's second half the negated
// mirror of its first: the sums of x (and dy) cancel to a small remainder, whose last f32
// bits depend on the order in which the double sums rounded. So two orders give different
// sums (sums of values in one range round to the same f32 in almost any order).
Tensor cancelling_tensor(const Shape& shape, uint64_t seed) {
  const std::vector<double> mantissa = values(test::random_tensor(shape, seed, 1.0f, 2.0f));
  const std::vector<double> exponent = values(test::random_tensor(shape, seed + 1, -30.0f, 30.0f));
  const std::vector<double> sign = values(test::random_tensor(shape, seed + 2));
  std::vector<double> v(mantissa.size());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::copysign(std::ldexp(mantissa[i], int(std::floor(exponent[i]))), sign[i]);
  const size_t s = v.size() / size_t(shape[0] * shape[1]);
  for (size_t plane = 0; plane < v.size(); plane += s)
    for (size_t k = 0; k < s / 2; ++k) v[plane + s - 1 - k] = -v[plane + k];
  return from_doubles(v, shape);
}

// Restores the OpenMP thread count when it goes out of scope.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) { omp_set_num_threads(threads); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_ = omp_get_max_threads();
};

// Big enough to run threaded, planes of two segments (the second not a multiple of the lanes).
const Shape kThreadedShape{3, 4, 40, 30, 20};

AllSums sums_on_threads(int threads, const Tensor& x, const Tensor& dy, const Tensor& shift, const Tensor& invstd) {
  ThreadCount count(threads);
  return all_sums(x, dy, shift, invstd);
}

TEST(BatchNorm3d, SumsAreTheSameBitsOnOneAndTwoThreads) {
  // The order of additions depends on the shape only (kernels/batchnorm_bodies.h), never
  // on how the segments are shared among threads.
  Tensor shift = test::random_tensor({4}, 52, 0.5f, 1.5f), invstd = test::random_tensor({4}, 53, 0.5f, 1.5f);
  Tensor x = cancelling_tensor(kThreadedShape, 50), dy = cancelling_tensor(kThreadedShape, 53);
  expect_same_bits(sums_on_threads(1, x, dy, shift, invstd), sums_on_threads(2, x, dy, shift, invstd));

  // Data in one range: within f32's rounding of double loops (accumulated in double,
  // rounded once to f32).
  x = test::random_tensor(kThreadedShape, 50, -1.0f, 3.0f);
  dy = test::random_tensor(kThreadedShape, 51);
  const AllSums two = sums_on_threads(2, x, dy, shift, invstd);
  expect_same_bits(sums_on_threads(1, x, dy, shift, invstd), two);
  const std::vector<double> s = values(shift), is = values(invstd);
  const test::Tolerance tight{1e-9, 2e-7};
  EXPECT_TRUE(
      test::tensors_close(two.plain, from_doubles(test::reference_batchnorm_channel_sums(x, {}), {2, 4}), tight));
  EXPECT_TRUE(
      test::tensors_close(two.shifted, from_doubles(test::reference_batchnorm_channel_sums(x, s), {2, 4}), tight));
  EXPECT_TRUE(test::tensors_close(two.backward,
                                  from_doubles(test::reference_batchnorm_backward_sums(x, dy, s, is), {2, 4}), tight));
}

// Channel c's sums in the order kernels/batchnorm_bodies.h states, one lane at a time as the
// CUDA threads run it: per segment the lanes (body::bn_stat_lane / bn_grad_lane) and the
// tree, then the fold. The backward sums with mean = shift; dy and invstd undefined: the
// statistics sums around shift (0 when undefined).
std::vector<float> sums_in_stated_order(const Tensor& x, const Tensor& dy, const Tensor& shift, const Tensor& invstd) {
  using namespace kernels;
  const BatchNormGeometry g{x.size(0), x.size(1), x.numel() / (x.size(0) * x.size(1))};
  const int64_t segments = bn_segment_count(g);
  const int lanes = bn_lanes(g.s);
  std::vector<double> seg_a(static_cast<size_t>(segments)), seg_b(seg_a.size());
  for (int64_t i = 0; i < segments; ++i) {
    const BatchNormSegment seg = bn_segment(g, i);
    const double k = shift.defined() ? double(shift.data<float>()[seg.channel]) : 0.0;
    std::vector<double> a(static_cast<size_t>(lanes)), b(a.size());
    for (int l = 0; l < lanes; ++l) {
      if (dy.defined())
        body::bn_grad_lane(x.data<float>(), dy.data<float>(), seg, k, nullptr, l, lanes, &a[size_t(l)], &b[size_t(l)]);
      else
        body::bn_stat_lane(x.data<float>(), seg, k, l, lanes, &a[size_t(l)], &b[size_t(l)]);
    }
    for (int width = lanes / 2; width > 0; width /= 2)
      for (int l = 0; l < width; ++l) body::bn_tree_step(a.data(), b.data(), l, width);
    seg_a[size_t(i)] = a[0];
    seg_b[size_t(i)] = b[0];
  }
  std::vector<float> sums(size_t(2 * g.c));
  for (int64_t c = 0; c < g.c; ++c) {
    double a, b;
    body::bn_fold_channel(seg_a.data(), seg_b.data(), g, c, &a, &b);
    body::bn_store_sums(c, g.c, a, b, invstd.defined() ? invstd.data<float>() : nullptr, sums.data());
  }
  return sums;
}

TEST(BatchNorm3d, SumsFollowTheOrderOfTheBodies) {
  // The CPU loop interleaves the lanes of a segment; the result must be the bits of the
  // lane-by-lane order the CUDA kernel runs, or the backends would disagree.
  for (const Shape& shape : {kThreadedShape, Shape{2, 3, 5, 7, 9}, Shape{1, 2, 130, 130, 1}}) {
    SCOPED_TRACE(shape.str());
    const int64_t c = shape[1];
    Tensor x = cancelling_tensor(shape, 54), dy = cancelling_tensor(shape, 57);
    Tensor shift = test::random_tensor({c}, 60, 0.5f, 1.5f), invstd = test::random_tensor({c}, 61, 0.5f, 1.5f);
    const AllSums cpu = all_sums(x, dy, shift, invstd);
    EXPECT_EQ(cpu.plain.to_vector<float>(), sums_in_stated_order(x, Tensor(), Tensor(), Tensor()));
    EXPECT_EQ(cpu.shifted.to_vector<float>(), sums_in_stated_order(x, Tensor(), shift, Tensor()));
    EXPECT_EQ(cpu.backward.to_vector<float>(), sums_in_stated_order(x, dy, shift, invstd));
  }
}

TEST(BatchNorm3d, PerElementStepsMatchTheBodiesOnOneAndTwoThreads) {
  // Normalize and the input gradient walk planes (split mid-plane between two threads here)
  // with per-channel coefficients; every element must equal the per-element body the CUDA
  // kernels run.
  using namespace kernels;
  const Shape shape{3, 5, 9, 11, 70};
  const int64_t c = shape[1], count = shape.numel() / c;
  const BatchNormGeometry g{shape[0], c, shape.numel() / (shape[0] * c)};
  Tensor x = test::random_tensor(shape, 60, -1.0f, 3.0f), dy = test::random_tensor(shape, 61);
  Tensor mean = test::random_tensor({c}, 62), invstd = test::random_tensor({c}, 63, 0.5f, 1.5f);
  Tensor weight = test::random_tensor({c}, 64, 0.5f, 2.0f), bias = test::random_tensor({c}, 65);
  Tensor sums = test::random_tensor({2, c}, 66, -100.0f, 100.0f);
  std::vector<float> y(size_t(shape.numel())), y_relu(y.size()), gated(y.size()), dx_train(y.size()), dx_eval(y.size());
  std::vector<float> dx_train_relu(y.size()), dx_eval_relu(y.size());
  const float *w = weight.data<float>(), *b = bias.data<float>();
  for (int64_t i = 0; i < shape.numel(); ++i) {
    body::bn_normalize_at(i, x.data<float>(), g, mean.data<float>(), invstd.data<float>(), weight.data<float>(),
                          bias.data<float>(), BnActivation::none, y.data());
    body::bn_normalize_at(i, x.data<float>(), g, mean.data<float>(), invstd.data<float>(), weight.data<float>(),
                          bias.data<float>(), BnActivation::relu, y_relu.data());
    body::bn_relu_gate_at(i, x.data<float>(), dy.data<float>(), g, mean.data<float>(), invstd.data<float>(),
                          weight.data<float>(), bias.data<float>(), gated.data());
    for (const bool relu : {false, true}) {
      body::bn_backward_input_at(i, x.data<float>(), dy.data<float>(), g, mean.data<float>(), invstd.data<float>(), w,
                                 sums.data<float>(), count, true, relu, w, b, (relu ? dx_train_relu : dx_train).data());
      body::bn_backward_input_at(i, x.data<float>(), dy.data<float>(), g, mean.data<float>(), invstd.data<float>(), w,
                                 nullptr, count, false, relu, w, b, (relu ? dx_eval_relu : dx_eval).data());
    }
  }
  for (int t : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(t));
    ThreadCount threads(t);
    Tensor out = Tensor::empty(shape);
    ops::batchnorm_normalize(x, mean, invstd, weight, bias, out);
    EXPECT_EQ(out.to_vector<float>(), y);
    ops::batchnorm_normalize(x, mean, invstd, weight, bias, out, BnActivation::relu);
    EXPECT_EQ(out.to_vector<float>(), y_relu);
    ops::batchnorm_relu_gate(x, dy, mean, invstd, weight, bias, out);
    EXPECT_EQ(out.to_vector<float>(), gated);
    ops::batchnorm_backward_input(x, dy, mean, invstd, weight, sums, count, true, out);
    EXPECT_EQ(out.to_vector<float>(), dx_train);
    ops::batchnorm_backward_input(x, dy, mean, invstd, weight, Tensor(), count, false, out);
    EXPECT_EQ(out.to_vector<float>(), dx_eval);
    const ops::BnBackwardGate gate{BnActivation::relu, weight, bias};
    ops::batchnorm_backward_input(x, dy, mean, invstd, weight, sums, count, true, out, gate);
    EXPECT_EQ(out.to_vector<float>(), dx_train_relu);
    ops::batchnorm_backward_input(x, dy, mean, invstd, weight, Tensor(), count, false, out, gate);
    EXPECT_EQ(out.to_vector<float>(), dx_eval_relu);
  }
}

// The backward of batch norm + ReLU reading dy through the gate is, bit for bit, the gated
// gradient written first (batchnorm_relu_gate) and read by the plain steps; in training and
// evaluation, with and without weight and bias, in f32 and bf16, with dx over dy.
TEST(BatchNorm3d, TheGatedBackwardStepsEqualGatingFirst) {
  const Shape shape{2, 3, 5, 7, 9};
  const int64_t c = shape[1], count = shape.numel() / c;
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const bool affine : {true, false})
      for (const bool training : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (affine ? " affine" : " plain") +
                     (training ? " training" : " eval"));
        const Tensor x = test::random_tensor(shape, 70, -1.0f, 1.5f, dtype);
        const Tensor dy = test::random_tensor(shape, 71, -1.0f, 1.0f, dtype);
        const Tensor mean = test::random_tensor({c}, 72, -0.2f, 0.2f),
                     invstd = test::random_tensor({c}, 73, 0.5f, 1.5f);
        const Tensor weight = affine ? test::random_tensor({c}, 74, -1.0f, 2.0f) : Tensor();
        const Tensor bias = affine ? test::random_tensor({c}, 75, -0.5f, 0.5f) : Tensor();
        Tensor gated = Tensor::empty(shape, dtype), sums_ref = Tensor::empty({2, c}),
               dx_ref = Tensor::empty(shape, dtype);
        ops::batchnorm_relu_gate(x, dy, mean, invstd, weight, bias, gated);
        ops::batchnorm_backward_sums(x, gated, mean, invstd, sums_ref);
        ops::batchnorm_backward_input(x, gated, mean, invstd, weight, sums_ref, count, training, dx_ref);
        const ops::BnBackwardGate gate{ops::BnActivation::relu, weight, bias};
        Tensor sums = Tensor::empty({2, c}), dx = dy.clone();
        ops::batchnorm_backward_sums(x, dy, mean, invstd, sums, gate);
        EXPECT_TRUE(test::tensors_equal(sums, sums_ref));
        ops::batchnorm_backward_input(x, dx, mean, invstd, weight, sums, count, training, dx, gate);  // dx over dy
        EXPECT_TRUE(test::tensors_equal(dx, dx_ref));
        // The gate does something here: some elements are cut, so the ungated sums differ.
        Tensor ungated = Tensor::empty({2, c});
        ops::batchnorm_backward_sums(x, dy, mean, invstd, ungated);
        EXPECT_FALSE(test::tensors_equal(ungated, sums_ref));
      }
}

TEST(BatchNorm3d, ErrorsNameTheLayerAndShapes) {
  nn::BatchNorm3d bn(3);
  std::string e = test::error_message([&] { bn.forward(test::random_tensor({2, 4, 2, 2, 2}, 1)); });
  EXPECT_NE(e.find("BatchNorm3d"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 4, 2, 2, 2]"), std::string::npos) << e;
  EXPECT_NE(e.find("channels"), std::string::npos) << e;

  e = test::error_message([&] { bn.forward(test::random_tensor({2, 3, 4, 4}, 1)); });
  EXPECT_NE(e.find("BatchNorm3d"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3, 4, 4]"), std::string::npos) << e;

  e = test::error_message([&] { bn.forward(test::random_tensor({1, 3, 1, 1, 1}, 1)); });
  EXPECT_NE(e.find("BatchNorm3d"), std::string::npos) << e;
  EXPECT_NE(e.find("Expected more than 1 value per channel when training"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 3, 1, 1, 1]"), std::string::npos) << e;
  EXPECT_EQ(bn.num_batches_tracked().to_vector<int64_t>(), std::vector<int64_t>{0});

  nn::BatchNorm3d fresh(3);
  e = test::error_message([&] { fresh.backward(test::random_tensor({1, 3, 2, 2, 2}, 1)); });
  EXPECT_NE(e.find("before forward"), std::string::npos) << e;
  fresh.forward(test::random_tensor({1, 3, 2, 2, 2}, 1));
  e = test::error_message([&] { fresh.backward(test::random_tensor({1, 3, 2, 2, 3}, 1)); });
  EXPECT_NE(e.find("BatchNorm3d"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 3, 2, 2, 3]"), std::string::npos) << e;

  EXPECT_THROW(nn::BatchNorm3d(0), Error);
  Tensor sums = Tensor::empty({2, 4});
  e = test::error_message([&] { ops::batchnorm_channel_sums(test::random_tensor({2, 3, 2}, 1), Tensor(), sums); });
  EXPECT_NE(e.find("batchnorm_channel_sums"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3]"), std::string::npos) << e;
}

}  // namespace
}  // namespace gridnn
