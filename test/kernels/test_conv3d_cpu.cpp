// The CPU's two convolution implementations (kernels/conv3d.h, CpuConv): oneDNN against
// vol2col + GEMM on every shared geometry and on the network's own layers (forward with and
// without bias, backward data, backward filter accumulating), each repeated bit for bit,
// and the choice reported per pass; a layer's backward pair in one call. Both are also checked against double loops by
// the op harness (test/ops/cases_conv3d.cpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "kernels/conv3d.h"
#include "kernels/cpu/conv3d_onednn.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "test/support/conv3d_cases.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using ops::ConvPass;
using ops::CpuConv;
using test::Conv3dCase;
using test::geometry_of;
using test::random_tensor;

// Sets the CPU implementation for a scope.
class UseConv {
 public:
  explicit UseConv(CpuConv c) : previous_(ops::set_cpu_conv(c)) {}
  ~UseConv() { ops::set_cpu_conv(previous_); }
  UseConv(const UseConv&) = delete;
  UseConv& operator=(const UseConv&) = delete;

 private:
  CpuConv previous_;
};

// The shared geometries plus ResAttNet3D's kinds of layers at small sizes: the stem
// (1 -> 8, 7^3 stride 2), a residual 3^3 conv, a strided 3^3 conv and the 1^3 strided
// shortcut, with channel counts that are not a multiple of oneDNN's block of 8 or 16.
std::vector<Conv3dCase> geometries() {
  std::vector<Conv3dCase> all = test::conv3d_cases();
  all.push_back({"stem", 2, 1, 8, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {16, 18, 14}});
  all.push_back({"residual", 2, 16, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {8, 10, 12}});
  all.push_back({"downsample", 3, 12, 24, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {9, 8, 10}});
  all.push_back({"shortcut", 2, 12, 24, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {9, 8, 10}});
  // Unit-stride kernels larger than the input (ResAttNet3D's layer4 on small volumes):
  // oneDNN runs these.
  all.push_back({"k3_on_2_planes", 2, 32, 32, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {2, 2, 2}});
  all.push_back({"k3_on_1_2_3_planes", 3, 16, 24, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 2, 3}});
  all.push_back({"k5_on_3_planes", 2, 8, 16, {5, 3, 5}, {1, 1, 1}, {2, 1, 2}, {3, 4, 2}});
  // Where oneDNN 2.6's backward filter is wrong or never returns (kernels/cpu/conv3d_onednn.cpp
  // keeps them on vol2col): strided kernels spanning about the whole depth, batch > 1.
  all.push_back({"k7_stride2_on_6_planes", 2, 2, 3, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {6, 7, 6}});
  all.push_back({"k7_stride2_on_7_planes", 3, 1, 3, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {7, 9, 9}});
  all.push_back({"k6_stride2_on_5_planes", 2, 2, 3, {6, 6, 6}, {2, 2, 2}, {3, 3, 3}, {5, 10, 10}});
  all.push_back({"k7_stride2_on_5_planes", 2, 2, 3, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {5, 9, 9}});
  all.push_back({"k9_stride2_on_6_planes", 2, 2, 3, {9, 9, 9}, {2, 2, 2}, {4, 4, 4}, {6, 10, 10}});
  return all;
}

struct Results {
  Tensor y, y_no_bias, dx, dw;
};

// Every pass of k with the inputs of seed 1..5; dw starts from a nonzero tensor, since
// backward filter accumulates.
Results run_all(const Conv3dCase& k) {
  const ops::Conv3dGeometry g = geometry_of(k);
  const Tensor x = random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1);
  const Tensor w = random_tensor({k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}, 2);
  const Tensor b = random_tensor({k.o}, 3);
  const Tensor dy = random_tensor(ops::conv3d_output_shape(g, k.n), 4);
  Results r;
  r.y = Tensor::empty(dy.shape());
  r.y_no_bias = Tensor::empty(dy.shape());
  r.dx = Tensor::empty(x.shape());
  r.dw = random_tensor(w.shape(), 5);
  ops::conv3d_forward(x, w, b, g, r.y);
  ops::conv3d_forward(x, w, Tensor(), g, r.y_no_bias);
  ops::conv3d_backward_data(dy, w, g, r.dx);
  ops::conv3d_backward_filter(x, dy, g, r.dw);
  return r;
}

// Sums of up to a few thousand products in another order: relative to the largest value.
void expect_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const std::vector<double> a = test::to_doubles(actual), e = test::to_doubles(expected);
  ASSERT_EQ(a.size(), e.size()) << what;
  double scale = 1e-30;
  for (double v : e) scale = std::max(scale, std::abs(v));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]) / scale);
  EXPECT_LT(worst, 2e-6) << what;
}

TEST(Conv3dCpu, OneDnnAgreesWithVol2colOnEveryGeometry) {
  if (!kernels::cpu::onednn::built()) GTEST_SKIP() << "built without oneDNN";
  for (const Conv3dCase& k : geometries()) {
    Results ref, dnn;
    {
      UseConv use(CpuConv::vol2col);
      ref = run_all(k);
    }
    {
      UseConv use(CpuConv::onednn);
      dnn = run_all(k);
    }
    expect_close(dnn.y, ref.y, std::string(k.name) + " forward");
    expect_close(dnn.y_no_bias, ref.y_no_bias, std::string(k.name) + " forward without bias");
    expect_close(dnn.dx, ref.dx, std::string(k.name) + " backward data");
    expect_close(dnn.dw, ref.dw, std::string(k.name) + " backward filter");
  }
}

TEST(Conv3dCpu, EachImplementationRepeatsBitForBit) {
  for (CpuConv c : {CpuConv::onednn, CpuConv::vol2col}) {
    UseConv use(c);
    for (const Conv3dCase& k : geometries()) {
      const Results a = run_all(k), b = run_all(k);
      const std::string what = std::string(k.name) + (c == CpuConv::onednn ? " onednn" : " vol2col");
      EXPECT_TRUE(test::tensors_equal(a.y, b.y)) << what;
      EXPECT_TRUE(test::tensors_equal(a.dx, b.dx)) << what;
      EXPECT_TRUE(test::tensors_equal(a.dw, b.dw)) << what;
    }
  }
}

// A layer's backward in one call (dy reordered once for both passes) is the two calls, bit
// for bit, with and without dx, in every precision, on both implementations.
TEST(Conv3dCpu, TheBackwardPairIsBackwardDataThenFilterBitForBit) {
  for (CpuConv c : {CpuConv::onednn, CpuConv::vol2col}) {
    UseConv use(c);
    for (const Conv3dCase& k : geometries())
      for (ops::MathMode math : {ops::MathMode::fp32, ops::MathMode::bf16}) {
        const ops::Conv3dGeometry g = geometry_of(k);
        const Tensor x = random_tensor({k.n, k.c, k.in[0], k.in[1], k.in[2]}, 1);
        const Tensor w = random_tensor({k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}, 2);
        const Tensor dy = random_tensor(ops::conv3d_output_shape(g, k.n), 4);
        Tensor dx_alone = Tensor::empty(x.shape()), dw_alone = random_tensor(w.shape(), 5);
        ops::conv3d_backward_data(dy, w, g, dx_alone, math);
        ops::conv3d_backward_filter(x, dy, g, dw_alone, math);
        Tensor dx = Tensor::empty(x.shape()), dw = random_tensor(w.shape(), 5);
        ops::conv3d_backward(x, dy, w, g, dx, dw, math);
        const std::string what = std::string(k.name) + (c == CpuConv::onednn ? " onednn " : " vol2col ") +
                                 (math == ops::MathMode::fp32 ? "fp32" : "bf16");
        EXPECT_TRUE(test::tensors_equal(dx, dx_alone)) << what;
        EXPECT_TRUE(test::tensors_equal(dw, dw_alone)) << what;
        Tensor none, dw_only = random_tensor(w.shape(), 5), dw_filter = random_tensor(w.shape(), 5);
        ops::conv3d_backward(x, dy, w, g, none, dw_only, math);
        ops::conv3d_backward_filter(x, dy, g, dw_filter, math);
        EXPECT_TRUE(test::tensors_equal(dw_only, dw_filter)) << what << " without dx";
      }
  }
}

TEST(Conv3dCpu, ReportsWhatRunsEachPass) {
  const ops::Conv3dGeometry g = geometry_of({"residual", 2, 16, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {8, 10, 12}});
  {
    UseConv use(CpuConv::vol2col);
    EXPECT_EQ(ops::conv3d_cpu_implementation(g, 2, ConvPass::forward), "vol2col+gemm");
  }
  UseConv use(CpuConv::onednn);
  for (ConvPass p : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter}) {
    const std::string impl = ops::conv3d_cpu_implementation(g, 2, p);
    if (kernels::cpu::onednn::built()) {
      // Never oneDNN's reference kernel: that one falls back to vol2col + GEMM. Without
      // AVX-512 oneDNN 2.6's backward filter here is its GEMM per sample, which vol2col + GEMM
      // replaces by choice (conv3d_onednn.cpp: short_gemm_per_sample).
      EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
      if (p != ConvPass::backward_filter || impl != "vol2col+gemm") {
        EXPECT_EQ(impl.rfind("onednn ", 0), 0u) << impl;
      }
    } else {
      EXPECT_EQ(impl, "vol2col+gemm");
    }
  }
}

// Backward filter with one input channel (a network's stem) runs plane by plane
// (kernels/cpu/conv3d_one_channel.h) on the whole volume and on a depth slab (halo planes
// instead of depth padding), and on kernels, strides and paddings that differ per
// dimension, larger than the input or reaching it with some taps only: it matches vol2col +
// GEMM, accumulating into dw, and gives the same bits on one and on two threads.
TEST(Conv3dCpu, AOneChannelBackwardFilterRunsByPlanesOnAnyThreadCount) {
  const std::vector<Conv3dCase> cases = {
      {"stem", 2, 1, 16, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {24, 20, 22}},
      {"stem_slab", 2, 1, 16, {7, 7, 7}, {2, 2, 2}, {0, 3, 3}, {17, 20, 22}},
      {"mixed", 3, 1, 5, {5, 3, 4}, {3, 1, 2}, {1, 2, 0}, {13, 7, 9}},
      {"deep_kernel_few_planes", 2, 1, 4, {9, 3, 3}, {2, 2, 2}, {4, 1, 1}, {6, 9, 8}},
      {"one_plane_out", 1, 1, 3, {3, 3, 3}, {1, 1, 1}, {0, 1, 1}, {3, 5, 5}},
      {"wide_rows", 2, 1, 8, {3, 7, 7}, {1, 1, 1}, {1, 3, 3}, {9, 40, 200}},
  };
  const int threads = omp_get_max_threads();
  for (const Conv3dCase& k : cases) {
    Results ref;
    {
      UseConv use(CpuConv::vol2col);
      ref = run_all(k);
    }
    UseConv use(CpuConv::onednn);
    const ops::Conv3dGeometry g = geometry_of(k);
    EXPECT_EQ(ops::conv3d_cpu_implementation(g, k.n, ConvPass::backward_filter), "planes+gemm") << k.name;
    std::vector<Tensor> dw;
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      dw.push_back(run_all(k).dw);
      expect_close(dw.back(), ref.dw, std::string(k.name) + " backward filter, threads " + std::to_string(t));
    }
    omp_set_num_threads(threads);
    EXPECT_TRUE(test::tensors_equal(dw[0], dw[1])) << k.name;
  }
}

// The taps kept per dimension are the first to the last that read an input voxel from some
// output voxel, found here by trying every output; the narrowed geometry has the same
// output. Over kernels up to 7, strides up to 3, paddings up to 3 and inputs up to 6.
TEST(Conv3dCpu, NarrowsAKernelToTheTapsThatReachTheInput) {
  int narrowed = 0, none = 0;
  for (int64_t k = 1; k <= 7; ++k)
    for (int64_t s = 1; s <= 3; ++s)
      for (int64_t p = 0; p <= 3; ++p)
        for (int64_t in = 1; in <= 6; ++in) {
          if (k > in + 2 * p) continue;
          const ops::Conv3dGeometry g = ops::conv3d_geometry("test", 2, 3, {k, 3, 1}, {s, 1, 1}, {p, 1, 0}, {in, 4, 5});
          int64_t first = -1, last = -1;
          for (int64_t tap = 0; tap < k; ++tap)
            for (int64_t o = 0; o < g.out_size[0]; ++o) {
              const int64_t i = o * s + tap - p;
              if (i >= 0 && i < in) {
                if (first < 0) first = tap;
                last = tap;
              }
            }
          const ops::ConvTaps t = ops::conv3d_reaching_taps(g);
          const std::string what = "k " + std::to_string(k) + " s " + std::to_string(s) + " p " + std::to_string(p) +
                                   " in " + std::to_string(in);
          EXPECT_EQ(t.count[0], first < 0 ? 0 : last - first + 1) << what;
          if (first >= 0) {
            EXPECT_EQ(t.first[0], first) << what;
          }
          EXPECT_EQ(t.count[1], 3) << what;  // the other two dimensions reach with every tap
          EXPECT_EQ(t.count[2], 1) << what;
          EXPECT_EQ(t.none(), first < 0) << what;
          EXPECT_EQ(t.all(g), first == 0 && last == k - 1) << what;
          if (t.none()) {
            ++none;
            continue;
          }
          narrowed += !t.all(g);
          EXPECT_EQ(t.geometry.kernel[0], t.count[0]) << what;
          EXPECT_EQ(t.geometry.padding[0], p - first) << what;
          EXPECT_EQ(t.geometry.out_size[0], g.out_size[0]) << what;
        }
  EXPECT_GT(narrowed, 20);
  EXPECT_GT(none, 0);
}

// The taps a backend with padding on both sides runs (the CUDA backend, cuDNN): around the
// reaching taps, the fewest whose geometry, its padding on both sides, has g's output size
// (found here by trying every window); on them every pass gives what g gives, the weights
// moved by the shared box (ops::conv3d_taps_box), and the taps left out get no gradient.
TEST(Conv3dCpu, WidensTheReachingTapsForPaddingOnBothSides) {
  int widened = 0, narrowed = 0;
  for (int64_t k = 1; k <= 7; ++k)
    for (int64_t s = 1; s <= 3; ++s)
      for (int64_t p = 0; p <= 6; ++p)
        for (int64_t in = 1; in <= 5; ++in) {
          if (k > in + 2 * p) continue;
          const ops::Conv3dGeometry g = ops::conv3d_geometry("test", 2, 3, {k, 3, 1}, {s, 1, 1}, {p, 1, 0}, {in, 4, 5});
          const ops::ConvTaps r = ops::conv3d_reaching_taps(g), t = ops::conv3d_symmetric_taps(g);
          const std::string what = "k " + std::to_string(k) + " s " + std::to_string(s) + " p " + std::to_string(p) +
                                   " in " + std::to_string(in);
          ASSERT_EQ(t.none(), r.none()) << what;
          if (r.none()) continue;
          auto outputs = [&](int64_t lo, int64_t count) {  // with padding p - lo on both sides
            const int64_t span = in + 2 * (p - lo) - count;
            return span < 0 ? -1 : span / s + 1;
          };
          const int64_t lo = t.first[0], count = t.count[0];
          EXPECT_LE(lo, r.first[0]) << what;
          EXPECT_GE(lo + count, r.first[0] + r.count[0]) << what;
          EXPECT_LE(lo + count, k) << what;
          EXPECT_GE(p - lo, 0) << what;
          EXPECT_EQ(outputs(lo, count), g.out_size[0]) << what;
          for (int64_t c = r.count[0]; c < count; ++c)  // no narrower window has g's output
            for (int64_t l = 0; l + c <= k; ++l)
              if (l <= r.first[0] && l + c >= r.first[0] + r.count[0]) {
                EXPECT_NE(outputs(l, c), g.out_size[0]) << what;
              }
          EXPECT_EQ(t.geometry.kernel[0], count) << what;
          EXPECT_EQ(t.geometry.padding[0], p - lo) << what;
          EXPECT_EQ(t.count[1], 3) << what;
          EXPECT_EQ(t.count[2], 1) << what;
          widened += count > r.count[0];
          if (t.all(g)) continue;
          ++narrowed;
          // Every pass on t.geometry, as the CUDA backend runs it, against g.
          const Tensor x = random_tensor({2, 2, in, 4, 5}, 1), w = random_tensor(ops::conv3d_weight_shape(g), 2);
          const Tensor dy = random_tensor(ops::conv3d_output_shape(g, 2), 3), dw0 = random_tensor(w.shape(), 4);
          Tensor w_taps = Tensor::empty(ops::conv3d_weight_shape(t.geometry));
          kernels::cpu::strided_move(w, w_taps, ops::conv3d_taps_box(g, t, true), kernels::LayoutMode::copy);
          Tensor y = Tensor::empty(dy.shape()), y_taps = Tensor::empty(dy.shape());
          ops::conv3d_forward(x, w, Tensor(), g, y);
          ops::conv3d_forward(x, w_taps, Tensor(), t.geometry, y_taps);
          expect_close(y_taps, y, what + " forward");
          Tensor dx = Tensor::empty(x.shape()), dx_taps = Tensor::empty(x.shape());
          ops::conv3d_backward_data(dy, w, g, dx);
          ops::conv3d_backward_data(dy, w_taps, t.geometry, dx_taps);
          expect_close(dx_taps, dx, what + " backward data");
          Tensor dw = dw0.clone(), dw_by_taps = dw0.clone(), dw_taps = Tensor::zeros(w_taps.shape());
          ops::conv3d_backward_filter(x, dy, g, dw);
          ops::conv3d_backward_filter(x, dy, t.geometry, dw_taps);
          kernels::cpu::strided_move(dw_taps, dw_by_taps, ops::conv3d_taps_box(g, t, false), kernels::LayoutMode::add);
          expect_close(dw_by_taps, dw, what + " backward filter");
          const float *a = dw_by_taps.data<float>(), *before = dw0.data<float>();
          for (int64_t i = 0; i < dw.numel(); ++i) {
            const int64_t tap = (i / 3) % k;  // the depth tap of [O, C, k, 3, 1]
            if (tap < lo || tap >= lo + count) {
              EXPECT_EQ(a[i], before[i]) << what << " tap " << tap;
            }
          }
        }
  EXPECT_GT(widened, 5);
  EXPECT_GT(narrowed, 20);
}

// A plan is made per thread count: results from 1 and from 2 threads both match vol2col
// (they need not match each other bit for bit: backward filter splits its sums by thread).
TEST(Conv3dCpu, OneDnnMatchesOnOneAndTwoThreads) {
  if (!kernels::cpu::onednn::built()) GTEST_SKIP() << "built without oneDNN";
  const Conv3dCase k{"residual", 2, 16, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {8, 10, 12}};
  Results ref;
  {
    UseConv use(CpuConv::vol2col);
    ref = run_all(k);
  }
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    Results dnn;
    {
      UseConv use(CpuConv::onednn);
      dnn = run_all(k);
    }
    expect_close(dnn.y, ref.y, "forward, threads " + std::to_string(t));
    expect_close(dnn.dx, ref.dx, "backward data, threads " + std::to_string(t));
    expect_close(dnn.dw, ref.dw, "backward filter, threads " + std::to_string(t));
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace gridnn
