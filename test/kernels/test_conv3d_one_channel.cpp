// Backward filter with one input channel in the shared bodies' order
// (kernels/conv3d_one_channel_bodies.h) on the CPU: against double loops, within the bound
// of its fp32 sums; a padding product the same as skipping it; the same bits on one and on
// two threads; and within a tolerance of the op (ops::conv3d_backward_filter). The CUDA
// kernel's bits against these: test_gpu_conv3d_one_channel.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/conv3d.h"
#include "kernels/conv3d_one_channel_bodies.h"
#include "kernels/cpu/conv3d_one_channel.h"
#include "test/support/conv3d_cases.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::Conv3dCase;
using test::geometry_of;
using test::one_channel_by_tiles;
using test::one_channel_inputs;
using test::OneChannelInputs;
using test::random_tensor;

// Strides 1 and 2 (and 3), paddings from 0 to the kernel, odd sizes, batches 1 to 3,
// several output channels (not only multiples of 4), kernels 3 and 7 and a mixed one.
const std::vector<Conv3dCase>& cases() {
  static const std::vector<Conv3dCase> all = {
      {"k3_s1_p0", 1, 1, 3, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, {5, 6, 7}},
      {"k3_s1_p1", 2, 1, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {5, 7, 6}},
      {"k3_s2_p2", 3, 1, 5, {3, 3, 3}, {2, 2, 2}, {2, 2, 2}, {7, 5, 9}},
      {"k3_s1_p3", 2, 1, 2, {3, 3, 3}, {1, 1, 1}, {3, 3, 3}, {3, 4, 5}},
      {"k7_s2_p3", 2, 1, 8, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {11, 13, 9}},
      {"k7_s2_p0", 1, 1, 6, {7, 7, 7}, {2, 2, 2}, {0, 0, 0}, {9, 11, 13}},
      {"k7_s1_p7", 1, 1, 3, {7, 7, 7}, {1, 1, 1}, {7, 7, 7}, {3, 2, 4}},
      {"mixed", 3, 1, 7, {3, 5, 2}, {1, 2, 3}, {2, 0, 1}, {6, 9, 8}},
  };
  return all;
}

// The gradient by double loops over the products that read the input (padding skipped),
// and the sum of their magnitudes.
struct Reference {
  std::vector<double> sum, magnitude;
};
Reference reference(const OneChannelInputs& in, const ops::Conv3dGeometry& g) {
  const int64_t N = in.x.size(0), O = g.out_channels, kd = g.kernel[0], kh = g.kernel[1], kw = g.kernel[2];
  const int64_t D = g.in_size[0], H = g.in_size[1], W = g.in_size[2];
  const int64_t Do = g.out_size[0], Ho = g.out_size[1], Wo = g.out_size[2];
  const float *x = in.x.data<float>(), *dy = in.dy.data<float>();
  Reference r{std::vector<double>(size_t(O * kd * kh * kw)), std::vector<double>(size_t(O * kd * kh * kw))};
  for (int64_t o = 0; o < O; ++o)
    for (int64_t a = 0; a < kd; ++a)
      for (int64_t b = 0; b < kh; ++b)
        for (int64_t c = 0; c < kw; ++c) {
          const size_t e = size_t(((o * kd + a) * kh + b) * kw + c);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t od = 0; od < Do; ++od)
              for (int64_t oh = 0; oh < Ho; ++oh)
                for (int64_t ow = 0; ow < Wo; ++ow) {
                  const int64_t id = od * g.stride[0] + a - g.padding[0], ih = oh * g.stride[1] + b - g.padding[1];
                  const int64_t iw = ow * g.stride[2] + c - g.padding[2];
                  if (id < 0 || id >= D || ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  const double p = double(dy[(((n * O + o) * Do + od) * Ho + oh) * Wo + ow]) *
                                   double(x[((n * D + id) * H + ih) * W + iw]);
                  r.sum[e] += p;
                  r.magnitude[e] += std::abs(p);
                }
        }
  return r;
}

// Each partial is a chain of Ho Wo fmaf, the tiles' partials a chain of N Do additions, and
// the result one more added to dw: relative to the magnitudes summed, at most
// (Ho Wo + N Do + 1) units of 2^-24 (to first order; twice that for room).
TEST(Conv3dOneChannel, ByTilesMatchesDoubleLoopsWithinItsSumsBound) {
  for (const Conv3dCase& k : cases()) {
    const ops::Conv3dGeometry g = geometry_of(k);
    ASSERT_TRUE(kernels::one_channel::takes(g)) << k.name;
    const OneChannelInputs in = one_channel_inputs(k, 11);
    const Reference ref = reference(in, g);
    const Tensor dw = one_channel_by_tiles(in, g);
    const double steps = double(g.out_plane() + kernels::one_channel::tiles(g, k.n) + 1);
    const float *got = dw.data<float>(), *before = in.dw0.data<float>();
    for (size_t e = 0; e < ref.sum.size(); ++e) {
      const double want = double(before[e]) + ref.sum[e];
      const double bound = 2.0 * steps * std::ldexp(ref.magnitude[e] + std::abs(double(before[e])), -24);
      ASSERT_LE(std::abs(double(got[e]) - want), bound) << k.name << " element " << e;
    }
  }
}

// A padding product is an fmaf with x = 0: the same bits as leaving it out, for finite dy.
TEST(Conv3dOneChannel, APaddingProductIsTheSameAsSkippingIt) {
  namespace body = kernels::one_channel::body;
  for (const Conv3dCase& k : cases()) {
    const ops::Conv3dGeometry g = geometry_of(k);
    const OneChannelInputs in = one_channel_inputs(k, 11);
    const float *x = in.x.data<float>(), *dy = in.dy.data<float>();
    const int64_t per_tile = kernels::one_channel::partials_per_tile(g), kvol = g.kernel_volume();
    const int64_t Ho = g.out_size[1], Wo = g.out_size[2];
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t od = 0; od < g.out_size[0]; ++od)
        for (int64_t e = 0; e < per_tile; ++e) {
          const int64_t o = e / kvol, tap = e % kvol, c = tap % g.kernel[2], b = (tap / g.kernel[2]) % g.kernel[1];
          const int64_t a = tap / (g.kernel[2] * g.kernel[1]), id = od * g.stride[0] + a - g.padding[0];
          const float* plane = dy + ((n * g.out_channels + o) * g.out_size[0] + od) * Ho * Wo;
          float skipped = 0.0f;
          for (int64_t oh = 0; oh < Ho; ++oh)
            for (int64_t ow = 0; ow < Wo; ++ow) {
              const int64_t ih = oh * g.stride[1] + b - g.padding[1], iw = ow * g.stride[2] + c - g.padding[2];
              if (id < 0 || id >= g.in_size[0] || ih < 0 || ih >= g.in_size[1] || iw < 0 || iw >= g.in_size[2])
                continue;
              skipped = fmaf(plane[oh * Wo + ow], x[((n * g.in_size[0] + id) * g.in_size[1] + ih) * g.in_size[2] + iw],
                             skipped);
            }
          const float partial = body::partial(x, dy, g, n, od, e);
          ASSERT_EQ(std::signbit(partial), std::signbit(skipped)) << k.name << " element " << e;
          ASSERT_EQ(partial, skipped) << k.name << " element " << e;
        }
  }
}

TEST(Conv3dOneChannel, ByTilesGivesTheSameBitsOnAnyThreadCount) {
  const int threads = omp_get_max_threads();
  std::vector<Conv3dCase> all = cases();
  all.push_back({"stem", 2, 1, 16, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {24, 20, 22}});  // parallel loops
  for (const Conv3dCase& k : all) {
    const ops::Conv3dGeometry g = geometry_of(k);
    const OneChannelInputs in = one_channel_inputs(k, 11);
    std::vector<Tensor> dw;
    for (int t : {1, 2, 2}) {
      omp_set_num_threads(t);
      dw.push_back(one_channel_by_tiles(in, g));
    }
    omp_set_num_threads(threads);
    EXPECT_TRUE(test::tensors_equal(dw[1], dw[0])) << k.name;
    EXPECT_TRUE(test::tensors_equal(dw[2], dw[0])) << k.name;
  }
}

// Against the CPU's backward filter op (plane by plane or vol2col + GEMM: another order).
TEST(Conv3dOneChannel, ByTilesAgreesWithTheOp) {
  for (const Conv3dCase& k : cases()) {
    const ops::Conv3dGeometry g = geometry_of(k);
    const OneChannelInputs in = one_channel_inputs(k, 11);
    Tensor dw = in.dw0.clone();
    ops::conv3d_backward_filter(in.x, in.dy, g, dw);
    EXPECT_LT(test::max_relative_error(one_channel_by_tiles(in, g), dw), 1e-5) << k.name;
  }
}

}  // namespace
}  // namespace gridnn
