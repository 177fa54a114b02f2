// Domain parallelism (docs/design.md §4): DomainParallel convolution, max and average pooling on a depth
// split over Pr = world size (Pc = 1) against the single-process layers. Every rank computes
// the whole reference itself (same weights, full input) and compares its output slab and dx
// slab with the matching planes, and the weight gradients summed over the ranks with the
// single-process ones (fp32: relative error <= 1e-5). The halo traffic in the communication
// log must equal the plane counts worked out here from the rule alone (B*C*H*W per plane),
// and a depth too thin for the row is an error naming the layer and the largest usable Pr.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "models/dist/domain_parallel.h"
#include "models/layers/conv3d.h"
#include "models/layers/pool3d.h"
#include "parallel/halo.h"
#include "parallel/process_grid.h"
#include "test/support/error_message.h"
#include "test/support/mpi_main.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using nn::Triple3;

constexpr double kTol = 1e-5;  // fp32, reassociated reductions

std::unique_ptr<parallel::ProcessGrid> row_grid() {
  return parallel::ProcessGrid::create(parallel::GridShape{1, test::world_size(), 1});
}

// ---- the rule, worked out independently of parallel/halo.cpp -------------------------------

struct Span {
  int64_t begin, end;
};

Span balanced(int64_t n, int parts, int i) {
  const int64_t q = n / parts, r = n % parts;
  const int64_t begin = i * q + std::min<int64_t>(i, r);
  return {begin, begin + q + (i < r ? 1 : 0)};
}

int owner_of(int64_t plane, int64_t n, int parts) {
  for (int q = 0; q < parts; ++q) {
    const Span s = balanced(n, parts, q);
    if (plane >= s.begin && plane < s.end) return q;
  }
  return -1;
}

// Whether rank q's output planes read input plane j (k, s, p along depth).
bool needs(int q, int64_t j, int64_t d_in, int64_t k, int64_t s, int64_t p, int parts) {
  const int64_t d_out = (d_in + 2 * p - k) / s + 1;
  const Span o = balanced(d_out, parts, q);
  return j >= o.begin * s - p && j < (o.end - 1) * s - p + k;
}

// Planes `me` sends in the forward (to every rank that needs a plane it owns) and in the
// backward (each plane it needs but does not own goes back to its owner).
struct PlaneCounts {
  int64_t forward = 0, backward = 0;
};

PlaneCounts halo_planes(int me, int parts, int64_t d_in, int64_t k, int64_t s, int64_t p) {
  PlaneCounts c;
  for (int64_t j = 0; j < d_in; ++j) {
    const int owner = owner_of(j, d_in, parts);
    for (int q = 0; q < parts; ++q)
      if (q != owner && needs(q, j, d_in, k, s, p, parts) && owner == me) ++c.forward;
    if (owner != me && needs(me, j, d_in, k, s, p, parts)) ++c.backward;
  }
  return c;
}

// Planes [begin, end) of dimension 2 of a host f32 [B, C, D, H, W] tensor, by plain loops.
Tensor planes_of(const Tensor& t, Span span) {
  const Shape& sh = t.shape();
  const int64_t bc = sh[0] * sh[1], d = sh[2], hw = sh[3] * sh[4], n = span.end - span.begin;
  std::vector<float> all = t.to_vector<float>(), out;
  for (int64_t i = 0; i < bc; ++i)
    for (int64_t z = span.begin; z < span.end; ++z)
      for (int64_t e = 0; e < hw; ++e) out.push_back(all[size_t((i * d + z) * hw + e)]);
  return Tensor::from_vector(out, sh.with(2, n));
}

void expect_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  EXPECT_LE(test::max_relative_error(actual, expected), kTol) << what;
  EXPECT_TRUE(test::tensors_close(actual, expected, {1e-5, 1e-4})) << what;
}

int64_t logged(const std::string& layer) { return parallel::comm_log().elements("row", "send_recv", layer); }

// ---- convolution --------------------------------------------------------------------------

struct ConvCase {
  const char* name;
  int64_t batch, in, out;
  int64_t depth, h, w;
  Triple3 kernel, stride, padding;
  bool bias = true;
  bool input_gradient = true;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"stem_k7_s2_p3", 2, 1, 3, 17, 6, 5, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}},
      {"k3_s1_p1", 2, 2, 3, 11, 4, 5, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {"k3_s2_p1", 2, 2, 3, 13, 5, 4, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, false},
      {"k1_s2_p0_downsample", 2, 3, 2, 17, 4, 4, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}},
      {"k3_s1_p1_one_plane_per_rank", 1, 2, 2, 4, 3, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {"k5_s1_p2_halo_beyond_neighbour", 2, 2, 2, 5, 3, 4, {5, 3, 3}, {1, 1, 1}, {2, 1, 1}},
      {"mixed_k3x2x1_s1x2x1", 2, 2, 2, 13, 5, 4, {3, 2, 1}, {1, 2, 1}, {1, 0, 0}},
      {"stem_without_input_gradient", 2, 1, 2, 11, 5, 5, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, true, false},
  };
}

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class DistConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(DistConv, MatchesSingleProcessSlabsAndGradients) {
  const ConvCase& c = GetParam();
  auto grid = row_grid();
  const int parts = grid->shape().rows, me = grid->row_rank();
  const std::string layer = std::string("conv.") + c.name;
  const uint64_t seed = 1234;

  nn::Conv3d reference(c.in, c.out, c.kernel, c.stride, c.padding, c.bias);
  auto conv_layer =
      nn::domain_conv3d(*grid, c.in, c.out, c.kernel, c.stride, c.padding, c.bias, c.depth, c.input_gradient);
  nn::Module& conv = *conv_layer;
  conv.name_modules(layer);
  reference.initialize(seed);
  conv.initialize(seed);
  reference.set_input_gradient(c.input_gradient);

  // Same state_dict names and values as the single-process layer.
  auto ref_params = reference.named_parameters(), params = conv.named_parameters();
  ASSERT_EQ(params.size(), ref_params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].first, ref_params[i].first);
    EXPECT_TRUE(test::tensors_equal(params[i].second->value, ref_params[i].second->value));
  }

  const Tensor x = test::random_tensor({c.batch, c.in, c.depth, c.h, c.w}, 11);
  const Tensor y = reference.forward(x);
  const Tensor dy = test::random_tensor(y.shape(), 12);
  const Tensor dx = reference.backward(dy);

  const Span in = balanced(c.depth, parts, me), out = balanced(y.size(2), parts, me);
  const int64_t k = c.kernel[0], s = c.stride[0], p = c.padding[0];
  const PlaneCounts planes = halo_planes(me, parts, c.depth, k, s, p);
  const int64_t plane_elems = c.batch * c.in * c.h * c.w;

  parallel::comm_log().clear();
  const Tensor y_slab = conv.forward(planes_of(x, in));
  EXPECT_EQ(logged(layer), planes.forward * plane_elems) << "forward halo elements, rank " << me;
  expect_close(y_slab, planes_of(y, out), "output slab");

  parallel::comm_log().clear();
  const Tensor dx_slab = conv.backward(planes_of(dy, out));
  if (c.input_gradient) {
    EXPECT_EQ(logged(layer), planes.backward * plane_elems) << "backward halo elements, rank " << me;
    expect_close(dx_slab, planes_of(dx, in), "dx slab");
  } else {
    EXPECT_FALSE(dx_slab.defined());
    EXPECT_EQ(logged(layer), 0);
  }

  // Partial gradients: the sum over the row is the single-process gradient.
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].second->grad.clone();
    grid->row().all_reduce(g);
    EXPECT_LE(test::max_relative_error(g, ref_params[i].second->grad), kTol) << params[i].first;
  }
}

std::string conv_case_name(const ::testing::TestParamInfo<ConvCase>& p) { return p.param.name; }
INSTANTIATE_TEST_SUITE_P(Geometries, DistConv, ::testing::ValuesIn(conv_cases()), conv_case_name);

// ---- the overlapped halo against the blocking one -------------------------------------------

// The cases above and slabs thick enough to have inner planes on 4 ranks, with channel counts
// oneDNN runs its JIT kernels on; each in fp32 and bf16, on oneDNN and on vol2col + GEMM.
struct OverlapCase {
  ConvCase conv;
  ops::MathMode math;
  ops::CpuConv implementation;
};

std::vector<OverlapCase> overlap_cases() {
  std::vector<ConvCase> convs = conv_cases();
  convs.push_back({"k3_s1_p1_thick", 2, 8, 16, 26, 6, 5, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}});
  convs.push_back({"k3_s2_p1_thick", 1, 8, 16, 29, 5, 6, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}});
  convs.push_back({"stem_k7_s2_p3_thick", 2, 1, 8, 48, 9, 8, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, true, false});
  convs.push_back({"k5_s1_p2_thick_no_bias", 1, 4, 8, 30, 5, 5, {5, 3, 3}, {1, 1, 1}, {2, 1, 1}, false});
  std::vector<OverlapCase> cases;
  for (const ConvCase& c : convs)
    for (const ops::MathMode math : {ops::MathMode::fp32, ops::MathMode::bf16})
      for (const ops::CpuConv implementation : {ops::CpuConv::onednn, ops::CpuConv::vol2col})
        cases.push_back({c, math, implementation});
  return cases;
}

void PrintTo(const OverlapCase& c, std::ostream* os) { *os << c.conv.name; }

class HaloOverlap : public ::testing::TestWithParam<OverlapCase> {};

// The CPU's convolution implementation for a scope (the previous one back at its end).
struct CpuConvScope {
  explicit CpuConvScope(ops::CpuConv c) : previous(ops::set_cpu_conv(c)) {}
  ~CpuConvScope() { ops::set_cpu_conv(previous); }
  CpuConvScope(const CpuConvScope&) = delete;
  CpuConvScope& operator=(const CpuConvScope&) = delete;
  ops::CpuConv previous;
};

TEST_P(HaloOverlap, IsBitwiseTheBlockingExchange) {
  const ConvCase& c = GetParam().conv;
  const CpuConvScope implementation(GetParam().implementation);
  auto grid = row_grid();
  const int parts = grid->shape().rows, me = grid->row_rank();
  std::unique_ptr<nn::DomainParallel> layers[2];
  for (const parallel::HaloMode mode : {parallel::HaloMode::overlap, parallel::HaloMode::blocking}) {
    auto& layer = layers[mode == parallel::HaloMode::overlap ? 0 : 1];
    layer = nn::domain_conv3d(*grid, c.in, c.out, c.kernel, c.stride, c.padding, c.bias, c.depth, c.input_gradient,
                              "Conv3d", mode);
    layer->name_modules(std::string("conv.") + enum_name(mode));
    layer->initialize(7);
    layer->set_math_mode(GetParam().math);
  }
  nn::DomainParallel &overlapped = *layers[0], &blocking = *layers[1];
  EXPECT_FALSE(blocking.overlaps_forward());
  // A slab that receives halo planes and is a window and a stride thick has inner planes.
  const Span in = balanced(c.depth, parts, me);
  const int64_t d_out = (c.depth + 2 * c.padding[0] - c.kernel[0]) / c.stride[0] + 1;
  const bool receives = halo_planes(me, parts, c.depth, c.kernel[0], c.stride[0], c.padding[0]).backward > 0;
  if (receives && in.end - in.begin >= c.kernel[0] + c.stride[0]) {
    EXPECT_TRUE(overlapped.overlaps_forward())
        << "rank " << me << ": no inner planes in a slab of " << in.end - in.begin;
  }

  const Tensor x = planes_of(test::random_tensor({c.batch, c.in, c.depth, c.h, c.w}, 31), in);
  Tensor y[2], dx[2], dy;
  parallel::comm_log().clear();
  for (int i = 0; i < 2; ++i) {
    y[i] = layers[i]->forward(x);
    ASSERT_EQ(y[i].size(2), balanced(d_out, parts, me).end - balanced(d_out, parts, me).begin);
    if (i == 0) dy = test::random_tensor(y[0].shape(), uint64_t(32 + me));
    dx[i] = layers[i]->backward(dy);
  }
  // The same messages either way: the halo planes, then their gradients.
  EXPECT_EQ(logged("conv.overlap"), logged("conv.blocking"));
  EXPECT_TRUE(test::tensors_equal(y[0], y[1])) << "output slab, rank " << me;
  ASSERT_EQ(dx[0].defined(), c.input_gradient);
  if (c.input_gradient) {
    EXPECT_TRUE(test::tensors_equal(dx[0], dx[1])) << "dx slab, rank " << me;
  }
  const auto a = overlapped.named_parameters(), b = blocking.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(test::tensors_equal(a[i].second->grad, b[i].second->grad)) << a[i].first << ", rank " << me;
}

std::string overlap_case_name(const ::testing::TestParamInfo<OverlapCase>& p) {
  return std::string(p.param.conv.name) + "_" + enum_name(p.param.math) + "_" +
         (p.param.implementation == ops::CpuConv::onednn ? "onednn" : "vol2col");
}
INSTANTIATE_TEST_SUITE_P(Geometries, HaloOverlap, ::testing::ValuesIn(overlap_cases()), overlap_case_name);

// ---- pooling ------------------------------------------------------------------------------

struct PoolCase {
  const char* name;
  bool max;
  int64_t batch, channels, depth, h, w;
  Triple3 kernel, stride, padding;
};

std::vector<PoolCase> pool_cases() {
  return {
      {"max_k3_s2_p1", true, 2, 2, 11, 5, 4, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {"max_k3_s2_p1_depth9", true, 1, 2, 9, 4, 4, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {"max_k2_default_stride", true, 2, 1, 8, 4, 4, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}},
      {"max_k3_s1_p1_one_plane_per_rank", true, 1, 2, 4, 3, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {"avg_k3_s2_p1", false, 2, 2, 13, 4, 5, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {"avg_k3_s1_p1", false, 1, 2, 7, 3, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
  };
}

void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

class DistPool : public ::testing::TestWithParam<PoolCase> {};

TEST_P(DistPool, MatchesSingleProcessSlabs) {
  const PoolCase& c = GetParam();
  auto grid = row_grid();
  const int parts = grid->shape().rows, me = grid->row_rank();
  const std::string layer = std::string("pool.") + c.name;

  std::unique_ptr<nn::Module> reference, pool;
  if (c.max) {
    reference = std::make_unique<nn::MaxPool3d>(c.kernel, c.stride, c.padding);
    pool = nn::domain_max_pool3d(*grid, c.kernel, c.stride, c.padding, c.depth);
  } else {
    reference = std::make_unique<nn::AvgPool3d>(c.kernel, c.stride, c.padding);
    pool = nn::domain_avg_pool3d(*grid, c.kernel, c.stride, c.padding, c.depth);
  }
  pool->name_modules(layer);
  // Max pooling over negative values: zero padding planes would win at the edges.
  const Tensor x = c.max ? test::random_tensor({c.batch, c.channels, c.depth, c.h, c.w}, 21, -2.0f, -1.0f)
                         : test::random_tensor({c.batch, c.channels, c.depth, c.h, c.w}, 21);
  const Tensor y = reference->forward(x);
  const Tensor dy = test::random_tensor(y.shape(), 22);
  const Tensor dx = reference->backward(dy);

  const Span in = balanced(c.depth, parts, me), out = balanced(y.size(2), parts, me);
  const int64_t k = c.kernel[0], s = c.stride[0] == 0 ? k : c.stride[0], p = c.padding[0];
  const PlaneCounts planes = halo_planes(me, parts, c.depth, k, s, p);
  const int64_t plane_elems = c.batch * c.channels * c.h * c.w;

  parallel::comm_log().clear();
  const Tensor y_slab = pool->forward(planes_of(x, in));
  EXPECT_EQ(logged(layer), planes.forward * plane_elems) << "forward halo elements, rank " << me;
  expect_close(y_slab, planes_of(y, out), "output slab");

  parallel::comm_log().clear();
  const Tensor dx_slab = pool->backward(planes_of(dy, out));
  EXPECT_EQ(logged(layer), planes.backward * plane_elems) << "backward halo elements, rank " << me;
  expect_close(dx_slab, planes_of(dx, in), "dx slab");
}

std::string pool_case_name(const ::testing::TestParamInfo<PoolCase>& p) { return p.param.name; }
INSTANTIATE_TEST_SUITE_P(Geometries, DistPool, ::testing::ValuesIn(pool_cases()), pool_case_name);

// ---- the plan and its errors --------------------------------------------------------------

// D = 5, k5 s1 p2 over 4 ranks: inputs [0,2) [2,3) [3,4) [4,5), outputs the same; rank 0
// reads [-2, 4), so it fetches from ranks 1 and 2 (not only its neighbour).
TEST(DepthHalo, PlanFollowsTheRule) {
  const parallel::DepthHalo h = parallel::plan_depth_halo("l", 5, {5, 1, 2}, 4, 0);
  EXPECT_EQ(h.needed.begin, -2);
  EXPECT_EQ(h.needed.end, 4);
  EXPECT_EQ(h.padding_before(), 2);
  EXPECT_EQ(h.padding_after(), 0);
  ASSERT_EQ(h.receives.size(), 2u);
  EXPECT_EQ(h.receives[0].peer, 1);
  EXPECT_EQ(h.receives[0].planes.begin, 2);
  EXPECT_EQ(h.receives[0].planes.end, 3);
  EXPECT_EQ(h.receives[1].peer, 2);
  EXPECT_EQ(h.receives[1].planes.begin, 3);
  ASSERT_EQ(h.sends.size(), 2u);  // rank 1 reads [0, 5), rank 2 reads [1, 5), rank 3 [2, 5)
  EXPECT_EQ(h.sends[0].peer, 1);
  EXPECT_EQ(h.sends[0].planes.begin, 0);
  EXPECT_EQ(h.sends[0].planes.end, 2);
  EXPECT_EQ(h.sends[1].peer, 2);
  EXPECT_EQ(h.sends[1].planes.begin, 1);
  EXPECT_EQ(h.sends[1].planes.end, 2);

  // The stem: 17 planes, k7 s2 p3 -> 9 outputs; rank 3 of 4 owns outputs [7, 9), inputs
  // [13, 17) and reads [11, 20).
  const parallel::DepthHalo stem = parallel::plan_depth_halo("l", 17, {7, 2, 3}, 4, 3);
  EXPECT_EQ(stem.output.global, 9);
  EXPECT_EQ(stem.needed.begin, 11);
  EXPECT_EQ(stem.needed.end, 20);
  EXPECT_EQ(stem.padding_after(), 3);
  ASSERT_EQ(stem.receives.size(), 1u);  // [11, 13) from rank 2
  EXPECT_EQ(stem.receives[0].peer, 2);
  EXPECT_EQ(stem.receives[0].planes.begin, 11);
  ASSERT_EQ(stem.sends.size(), 1u);  // rank 2 (outputs [5, 7)) reads [7, 16)
  EXPECT_EQ(stem.sends[0].peer, 2);
  EXPECT_EQ(stem.sends[0].planes.begin, 13);
  EXPECT_EQ(stem.sends[0].planes.end, 16);
}

TEST(DepthHalo, LargestUsableParts) {
  EXPECT_EQ(parallel::largest_usable_parts(4, {7, 2, 3}), 2);
  EXPECT_EQ(parallel::largest_usable_parts(17, {7, 2, 3}), 9);
  EXPECT_EQ(parallel::largest_usable_parts(5, {1, 1, 1}), 5);  // 7 outputs, 5 inputs
  EXPECT_EQ(parallel::largest_usable_parts(2, {5, 1, 0}), 0);
}

TEST(DepthHalo, ThinSlabIsAnErrorNamingTheLayerAndTheLargestPr) {
  const std::string msg = test::error_message([] {
    parallel::plan_depth_halo("stem.conv", 4, {7, 2, 3}, 4, test::world_rank() % 4);
  });
  EXPECT_NE(msg.find("stem.conv"), std::string::npos) << msg;
  EXPECT_NE(msg.find("largest usable Pr for this layer is 2"), std::string::npos) << msg;

  auto grid = row_grid();
  const int parts = grid->shape().rows;
  if (parts == 4) {  // the brief's case: depth 4 over 4 ranks with k7 s2
    const std::string m = test::error_message([&] {
      nn::domain_conv3d(*grid, 1, 2, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, true, 4, true, "stem.conv");
    });
    EXPECT_NE(m.find("stem.conv"), std::string::npos) << m;
    EXPECT_NE(m.find("largest usable Pr for this layer is 2"), std::string::npos) << m;
  }
  if (parts >= 2) {  // one plane fewer than ranks
    const std::string m = test::error_message([&] {
      nn::domain_max_pool3d(*grid, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, parts - 1, "layer2.pool");
    });
    EXPECT_NE(m.find("layer2.pool"), std::string::npos) << m;
    EXPECT_NE(m.find("largest usable Pr for this layer is " + std::to_string(parts - 1)), std::string::npos) << m;
  } else {
    EXPECT_EQ(test::error_message([&] {
                nn::domain_conv3d(*grid, 1, 2, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, true, 4, true, "stem.conv");
              }),
              "(no error)");
  }
}

TEST(DepthHalo, WrongSlabDepthIsAnError) {
  auto grid = row_grid();
  auto conv = nn::domain_conv3d(*grid, 1, 2, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, true, 8, true, "layer1.conv");
  const int64_t own =
      balanced(8, grid->shape().rows, grid->row_rank()).end - balanced(8, grid->shape().rows, grid->row_rank()).begin;
  const std::string m = test::error_message([&] { conv->forward(Tensor::zeros({1, 1, own + 1, 3, 3})); });
  EXPECT_NE(m.find("layer1.conv"), std::string::npos) << m;
}

}  // namespace
}  // namespace gridnn
