// Randomized sweeps (label slow): many seeded shapes for GEMM, reductions, convolution and
// max pooling against plain double loops (and pooling against the shared body bit for
// bit), to catch indexing errors that a handful of hand-picked shapes miss.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/conv3d.h"
#include "kernels/gemm.h"
#include "kernels/pool3d.h"
#include "kernels/reduce.h"
#include "test/ops/reference_conv_pool_norm.h"
#include "test/support/random_tensor.h"
#include "test/support/reference.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::to_doubles;

// A reproducible integer in [lo, hi] for draw i of the sweep `what`.
int64_t pick(const char* what, uint64_t i, int64_t lo, int64_t hi) {
  uint32_t w = philox_words(2026, philox_stream_id(what), i).v[0];
  return lo + int64_t(w % uint32_t(hi - lo + 1));
}

TEST(Sweep, GemmRandomShapesTransposesAndBatches) {
  for (uint64_t t = 0; t < 2000; ++t) {
    const int64_t m = pick("m", t, 1, 40), n = pick("n", t, 1, 40), k = pick("k", t, 0, 40);
    const int64_t batch = pick("batch", t, 1, 3);
    ops::GemmOptions o;
    o.transpose_a = pick("ta", t, 0, 1);
    o.transpose_b = pick("tb", t, 0, 1);
    o.alpha = float(pick("alpha", t, -2, 2)) * 0.5f;
    o.beta = float(pick("beta", t, 0, 2)) * 0.5f;
    const bool share_b = pick("share", t, 0, 1);
    Tensor a = test::random_tensor(o.transpose_a ? Shape{batch, k, m} : Shape{batch, m, k}, t);
    Shape b_one = o.transpose_b ? Shape{n, k} : Shape{k, n};
    Tensor b =
        share_b ? test::random_tensor(b_one, t + 1000) : test::random_tensor({batch, b_one[0], b_one[1]}, t + 1000);
    Tensor c = test::random_tensor({batch, m, n}, t + 2000);
    std::vector<double> va = to_doubles(a), vb = to_doubles(b), vc = to_doubles(c);
    ops::gemm_batched(a, b, c, o);
    std::vector<double> got = to_doubles(c);
    auto slice = [](const std::vector<double>& v, int64_t q, int64_t size) {
      return std::vector<double>(v.begin() + q * size, v.begin() + (q + 1) * size);
    };
    for (int64_t q = 0; q < batch; ++q) {
      std::vector<double> ref = test::reference_gemm(slice(va, q, m * k), share_b ? vb : slice(vb, q, k * n),
                                                     slice(vc, q, m * n), m, n, k, o);
      for (int64_t e = 0; e < m * n; ++e)
        ASSERT_NEAR(got[size_t(q * m * n + e)], ref[size_t(e)], 1e-4 * (1 + std::fabs(ref[size_t(e)])))
            << "case " << t << ": batch " << batch << " m " << m << " n " << n << " k " << k << " ta " << o.transpose_a
            << " tb " << o.transpose_b << " shared B " << share_b;
    }
  }
}

TEST(Sweep, ReductionsOverRandomFiveDimensionalShapes) {
  for (uint64_t t = 0; t < 600; ++t) {
    const int rank = int(pick("rank", t, 1, 5));
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(pick("dim", t * 8 + uint64_t(d), 1, rank <= 2 ? 700 : 9));
    Shape s(dims);
    const int dim = int(pick("reduce_dim", t, 0, rank - 1));
    Tensor x = test::random_tensor(s, t + 7);
    std::vector<double> sum = to_doubles(ops::sum(x, dim)), mx = to_doubles(ops::max(x, dim));
    std::vector<double> ref_sum = test::reference_reduce(ops::ReduceOp::sum, x, dim);
    std::vector<double> ref_max = test::reference_reduce(ops::ReduceOp::max, x, dim);
    for (size_t o = 0; o < sum.size(); ++o) {
      ASSERT_NEAR(sum[o], ref_sum[o], 1e-5 * (1 + double(s[dim])))
          << "case " << t << " shape " << s.str() << " dim " << dim;
      ASSERT_EQ(mx[o], ref_max[o]) << "case " << t << " shape " << s.str() << " dim " << dim;
    }
  }
}

// A random triple in [lo, hi] each, for draw i of `what`.
std::array<int64_t, 3> pick3(const char* what, uint64_t i, int64_t lo, int64_t hi) {
  return {pick(what, 3 * i, lo, hi), pick(what, 3 * i + 1, lo, hi), pick(what, 3 * i + 2, lo, hi)};
}

// Relative to the largest reference value: sums of up to a few thousand products.
void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5 * scale) << what << " element " << i;
}

// Every pass of the CPU's convolution on random geometries (kernels up to 5, strides up to
// 3, any padding below the kernel, non-cubic everything, batches up to 4; nearly all with
// small outputs, where the backward filter groups samples into one GEMM), on the default
// implementation and on vol2col + GEMM, about one case in four of the latter with a
// one-plane column budget (the slab loop).
TEST(Sweep, Conv3dRandomGeometriesAgainstDoubleLoops) {
  int64_t ran = 0;
  for (uint64_t t = 0; ran < 150 && t < 2000; ++t) {
    const int64_t n = pick("conv n", t, 1, 4), c = pick("conv c", t, 1, 20), o = pick("conv o", t, 1, 20);
    const auto k = pick3("conv k", t, 1, 5), s = pick3("conv s", t, 1, 3), in = pick3("conv in", t, 1, 12);
    std::array<int64_t, 3> pad{};
    for (int d = 0; d < 3; ++d) pad[size_t(d)] = pick("conv pad", 3 * t + uint64_t(d), 0, k[size_t(d)] - 1);
    ops::Conv3dGeometry g;
    try {
      g = ops::conv3d_geometry("sweep", c, o, k, s, pad, in);
    } catch (const Error&) {
      continue;  // no output along some dimension
    }
    const int64_t outs = g.out_size[0] * g.out_size[1] * g.out_size[2];
    if (n * c * o * k[0] * k[1] * k[2] * outs > 3'000'000) continue;  // keep the double loops quick
    ++ran;
    const Tensor x = test::random_tensor({n, c, in[0], in[1], in[2]}, 10 * t + 1);
    const Tensor w = test::random_tensor({o, c, k[0], k[1], k[2]}, 10 * t + 2);
    const Tensor b = test::random_tensor({o}, 10 * t + 3);
    const Tensor dy = test::random_tensor(ops::conv3d_output_shape(g, n), 10 * t + 4);
    const Tensor dw0 = test::random_tensor(w.shape(), 10 * t + 5);
    const std::vector<double> want_y = test::reference_conv3d_forward(x, w, b, g);
    const std::vector<double> want_dx = test::reference_conv3d_backward_data(dy, w, g);
    std::vector<double> want_dw = test::reference_conv3d_backward_filter(x, dy, g);
    const std::vector<double> dw_start = test::to_doubles(dw0);
    for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += dw_start[i];
    for (ops::CpuConv impl : {ops::cpu_conv(), ops::CpuConv::vol2col}) {
      const ops::CpuConv previous = ops::set_cpu_conv(impl);
      const bool one_plane = t % 4 == 3 && impl == ops::CpuConv::vol2col;
      const int64_t budget = one_plane ? kernels::cpu::conv3d_set_column_budget(1) : 0;
      Tensor y = Tensor::empty(dy.shape()), dx = Tensor::empty(x.shape()), dw = dw0.clone();
      ops::conv3d_forward(x, w, b, g, y);
      ops::conv3d_backward_data(dy, w, g, dx);
      ops::conv3d_backward_filter(x, dy, g, dw);
      if (one_plane) kernels::cpu::conv3d_set_column_budget(budget);
      ops::set_cpu_conv(previous);
      const std::string what = "case " + std::to_string(t) + " (" +
                               (impl == ops::CpuConv::vol2col ? "vol2col" : "default") +
                               (one_plane ? ", one plane" : "") + "): N " + std::to_string(n) + ", " + ops::str(g);
      expect_near_all(test::to_doubles(y), want_y, what + ": forward");
      expect_near_all(test::to_doubles(dx), want_dx, what + ": backward data");
      expect_near_all(test::to_doubles(dw), want_dw, what + ": backward filter");
    }
  }
  EXPECT_EQ(ran, 150);
}

// Max pooling on random geometries (kernels up to 5, strides up to 3, padding up to half
// the kernel, widths that do and do not split into the stride's phases) and inputs full of
// ties, NaNs and -inf: the forward equals the shared body bit for bit (values and
// argmaxes), the backward the scatter of dy onto the argmaxes.
TEST(Sweep, MaxPoolRandomGeometriesEqualTheBody) {
  int64_t ran = 0;
  for (uint64_t t = 0; ran < 400 && t < 4000; ++t) {
    ops::Pool3dParams p;
    p.kernel = pick3("pool k", t, 1, 5);
    p.stride = pick3("pool s", t, 1, 3);
    for (int d = 0; d < 3; ++d)
      p.padding[size_t(d)] = pick("pool pad", 3 * t + uint64_t(d), 0, p.kernel[size_t(d)] / 2);
    const auto in = pick3("pool in", t, 1, 20);
    const Shape xs{pick("pool n", t, 1, 2), pick("pool c", t, 1, 3), in[0], in[1], in[2]};
    kernels::Pool3dGeometry g;
    try {
      g = ops::pool3d_geometry("sweep", xs, p);
    } catch (const Error&) {
      continue;
    }
    ++ran;
    Tensor x = test::random_tensor(xs, 7 * t + 1, -3.0f, 3.0f);
    float* v = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      v[i] = std::round(v[i]);
      if (i % 29 == int64_t(t % 29)) v[i] = std::nanf("");
      if (i % 13 == int64_t(t % 13)) v[i] = -INFINITY;
    }
    const Shape ys = ops::pool3d_output_shape("sweep", xs, p);
    Tensor y = Tensor::empty(ys), argmax = Tensor::empty(ys, DType::i64);
    ops::max_pool3d_forward(x, p, y, argmax);
    const std::string what = "case " + std::to_string(t) + ": input " + xs.str() + ", output " + ys.str();
    std::vector<float> want(size_t(y.numel()));
    std::vector<int64_t> want_at(size_t(y.numel()));
    for (int64_t o = 0; o < y.numel(); ++o) {
      kernels::body::max_pool_at(o, v, g, want.data(), want_at.data());
      ASSERT_EQ(float_bits(y.data<float>()[o]), float_bits(want[size_t(o)])) << what << " output " << o;
      ASSERT_EQ(argmax.data<int64_t>()[o], want_at[size_t(o)]) << what << " output " << o;
    }
    const Tensor dy = test::random_tensor(ys, 7 * t + 2);
    Tensor dx = Tensor::empty(xs);
    ops::max_pool3d_backward(dy, argmax, p, dx);
    std::vector<double> want_dx(size_t(x.numel()), 0.0);
    const int64_t in_plane = in[0] * in[1] * in[2], out_plane = ys[2] * ys[3] * ys[4];
    for (int64_t o = 0; o < y.numel(); ++o)
      want_dx[size_t(o / out_plane * in_plane + argmax.data<int64_t>()[o])] += double(dy.data<float>()[o]);
    expect_near_all(test::to_doubles(dx), want_dx, what + ": backward");
  }
  EXPECT_EQ(ran, 400);
}

}  // namespace
}  // namespace gridnn
