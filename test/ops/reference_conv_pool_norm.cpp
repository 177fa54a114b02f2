#include "test/ops/reference_conv_pool_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "test/support/tensor_compare.h"

namespace gridnn::test {
namespace {

// Calls f(x_index, w_index, y_index) for every product x * w that contributes to an
// output: the direct definition of the convolution (batch, output channel, three output
// coordinates, input channel, three kernel taps), taps that land in the padding skipped.
template <class F>
void for_each_tap(const ops::Conv3dGeometry& g, int64_t batch, F&& f) {
  const int64_t C = g.in_channels, O = g.out_channels;
  const int64_t D = g.in_size[0], H = g.in_size[1], W = g.in_size[2];
  const int64_t Do = g.out_size[0], Ho = g.out_size[1], Wo = g.out_size[2];
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t od = 0; od < Do; ++od)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow)
            for (int64_t c = 0; c < C; ++c)
              for (int64_t a = 0; a < g.kernel[0]; ++a)
                for (int64_t b = 0; b < g.kernel[1]; ++b)
                  for (int64_t e = 0; e < g.kernel[2]; ++e) {
                    const int64_t id = od * g.stride[0] - g.padding[0] + a;
                    const int64_t ih = oh * g.stride[1] - g.padding[1] + b;
                    const int64_t iw = ow * g.stride[2] - g.padding[2] + e;
                    if (id < 0 || id >= D || ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                    const int64_t xi = (((n * C + c) * D + id) * H + ih) * W + iw;
                    const int64_t wi = (((o * C + c) * g.kernel[0] + a) * g.kernel[1] + b) * g.kernel[2] + e;
                    const int64_t yi = (((n * O + o) * Do + od) * Ho + oh) * Wo + ow;
                    f(xi, wi, yi);
                  }
}

int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

// x [N, C, ...] as N * C planes of s values.
struct Planes {
  int64_t n, c, s;
  explicit Planes(const Tensor& x) : n(x.size(0)), c(x.size(1)), s(x.numel() / (x.size(0) * x.size(1))) {}
  size_t channel(size_t i) const { return size_t((int64_t(i) / s) % c); }
};

double at_or(const std::vector<double>& v, size_t i, double otherwise) { return v.empty() ? otherwise : v[i]; }

}  // namespace

// ---- convolution -------------------------------------------------------------------------

std::vector<double> reference_conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                             const ops::Conv3dGeometry& g) {
  const int64_t batch = x.size(0), P = g.out_volume();
  const std::vector<double> xv = to_doubles(x), wv = to_doubles(w);
  std::vector<double> y(size_t(batch * g.out_channels * P), 0.0);
  for_each_tap(g, batch, [&](int64_t xi, int64_t wi, int64_t yi) { y[size_t(yi)] += xv[size_t(xi)] * wv[size_t(wi)]; });
  if (bias.defined()) {
    const std::vector<double> bv = to_doubles(bias);
    for (size_t i = 0; i < y.size(); ++i) y[i] += bv[(i / size_t(P)) % size_t(g.out_channels)];
  }
  return y;
}

std::vector<double> reference_conv3d_backward_data(const Tensor& dy, const Tensor& w, const ops::Conv3dGeometry& g) {
  const int64_t batch = dy.size(0);
  const std::vector<double> dyv = to_doubles(dy), wv = to_doubles(w);
  std::vector<double> dx(size_t(batch * g.in_channels * g.in_volume()), 0.0);
  for_each_tap(g, batch,
               [&](int64_t xi, int64_t wi, int64_t yi) { dx[size_t(xi)] += dyv[size_t(yi)] * wv[size_t(wi)]; });
  return dx;
}

std::vector<double> reference_conv3d_backward_filter(const Tensor& x, const Tensor& dy, const ops::Conv3dGeometry& g) {
  const std::vector<double> xv = to_doubles(x), dyv = to_doubles(dy);
  std::vector<double> dw(size_t(g.out_channels * g.col_rows()), 0.0);
  for_each_tap(g, x.size(0),
               [&](int64_t xi, int64_t wi, int64_t yi) { dw[size_t(wi)] += xv[size_t(xi)] * dyv[size_t(yi)]; });
  return dw;
}

std::vector<double> reference_conv3d_backward_bias(const Tensor& dy) {
  const int64_t N = dy.size(0), O = dy.size(1), P = dy.numel() / (N * O);
  const std::vector<double> dyv = to_doubles(dy);
  std::vector<double> db(size_t(O), 0.0);
  for (int64_t i = 0; i < dy.numel(); ++i) db[size_t((i / P) % O)] += dyv[size_t(i)];
  return db;
}

// ---- pooling -----------------------------------------------------------------------------

namespace {

// Calls f(at) for each voxel at = (d * H + h) * W + w of the D x H x W input in the window
// of output voxel (a, b, e), in kernel order; the padding is skipped.
template <class F>
void for_each_window_voxel(const ops::Pool3dParams& p, int64_t D, int64_t H, int64_t W, int64_t a, int64_t b, int64_t e,
                           F f) {
  for (int64_t i = 0; i < p.kernel[0]; ++i)
    for (int64_t j = 0; j < p.kernel[1]; ++j)
      for (int64_t k = 0; k < p.kernel[2]; ++k) {
        const int64_t d = a * p.stride[0] - p.padding[0] + i;
        const int64_t h = b * p.stride[1] - p.padding[1] + j;
        const int64_t w = e * p.stride[2] - p.padding[2] + k;
        if (d < 0 || d >= D || h < 0 || h >= H || w < 0 || w >= W) continue;  // padding
        f((d * H + h) * W + w);
      }
}

}  // namespace

PoolReference reference_pool3d(bool max, const Tensor& x, const ops::Pool3dParams& p) {
  const Shape& s = x.shape();
  const int64_t D = s[2], H = s[3], W = s[4];
  const int64_t od = pool_out_size(D, p.kernel[0], p.stride[0], p.padding[0]);
  const int64_t oh = pool_out_size(H, p.kernel[1], p.stride[1], p.padding[1]);
  const int64_t ow = pool_out_size(W, p.kernel[2], p.stride[2], p.padding[2]);
  const std::vector<double> in = to_doubles(x);
  PoolReference r;
  r.y_shape = Shape{s[0], s[1], od, oh, ow};
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
    for (int64_t a = 0; a < od; ++a)
      for (int64_t b = 0; b < oh; ++b)
        for (int64_t e = 0; e < ow; ++e) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t best_at = -1;
          for_each_window_voxel(p, D, H, W, a, b, e, [&](int64_t at) {
            const double v = in[size_t(nc * D * H * W + at)];
            sum += v;
            if (best_at < 0 || v > best) {
              best = v;
              best_at = at;
            }
          });
          r.y.push_back(max ? best : sum / double(p.kernel[0] * p.kernel[1] * p.kernel[2]));
          if (max) r.argmax.push_back(best_at);
        }
  return r;
}

std::vector<double> reference_pool3d_backward(bool max, const Shape& xs, const PoolReference& fwd, const Tensor& dy_t,
                                              const ops::Pool3dParams& p) {
  const int64_t D = xs[2], H = xs[3], W = xs[4], vol = D * H * W;
  const Shape& ys = fwd.y_shape;
  const std::vector<double> dy = to_doubles(dy_t);
  std::vector<double> dx(size_t(xs.numel()), 0.0);
  const double kvol = double(p.kernel[0] * p.kernel[1] * p.kernel[2]);
  int64_t o = 0;
  for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc)
    for (int64_t a = 0; a < ys[2]; ++a)
      for (int64_t b = 0; b < ys[3]; ++b)
        for (int64_t e = 0; e < ys[4]; ++e, ++o) {
          if (max) {
            dx[size_t(nc * vol + fwd.argmax[size_t(o)])] += dy[size_t(o)];
            continue;
          }
          for_each_window_voxel(p, D, H, W, a, b, e,
                                [&](int64_t at) { dx[size_t(nc * vol + at)] += dy[size_t(o)] / kvol; });
        }
  return dx;
}

std::vector<double> reference_global_avg_pool3d(const Tensor& x) {
  const Shape& s = x.shape();
  const int64_t vol = s[2] * s[3] * s[4];
  const std::vector<double> v = to_doubles(x);
  std::vector<double> y;
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc) {
    double sum = 0;
    for (int64_t i = 0; i < vol; ++i) sum += v[size_t(nc * vol + i)];
    y.push_back(sum / double(vol));
  }
  return y;
}

std::vector<double> reference_global_avg_pool3d_backward(const Tensor& dy, const Shape& xs) {
  const int64_t vol = xs[2] * xs[3] * xs[4];
  const std::vector<double> d = to_doubles(dy);
  std::vector<double> dx;
  for (int64_t i = 0; i < xs.numel(); ++i) dx.push_back(d[size_t(i / vol)] / double(vol));
  return dx;
}

Tensor distinct_values(const Shape& s, unsigned seed) {
  std::vector<float> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * float(i) - 0.005f * float(v.size());
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return Tensor::from_vector(v, s);
}

// ---- batch normalization -----------------------------------------------------------------

BatchNormStats reference_batchnorm_stats(const Tensor& x) {
  const Planes p(x);
  const std::vector<double> v = to_doubles(x);
  BatchNormStats r{std::vector<double>(size_t(p.c), 0.0), std::vector<double>(size_t(p.c), 0.0), p.n * p.s};
  for (int64_t ch = 0; ch < p.c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t k = 0; k < p.s; ++k) sum += v[size_t((i * p.c + ch) * p.s + k)];
    const double m = sum / double(r.count);
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t k = 0; k < p.s; ++k) sq += std::pow(v[size_t((i * p.c + ch) * p.s + k)] - m, 2);
    r.mean[size_t(ch)] = m;
    r.var[size_t(ch)] = sq / double(r.count);
  }
  return r;
}

std::vector<double> reference_batchnorm_channel_sums(const Tensor& x, const std::vector<double>& shift) {
  const Planes p(x);
  const std::vector<double> v = to_doubles(x);
  std::vector<double> sums(size_t(2 * p.c), 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t c = p.channel(i);
    const double d = v[i] - at_or(shift, c, 0.0);
    sums[c] += d;
    sums[size_t(p.c) + c] += d * d;
  }
  return sums;
}

BatchNormStats reference_batchnorm_moments(const std::vector<double>& sums, const std::vector<double>& shift,
                                           int64_t count) {
  const size_t c = sums.size() / 2;
  BatchNormStats r{std::vector<double>(c), std::vector<double>(c), count};
  for (size_t k = 0; k < c; ++k) {
    const double m1 = sums[k] / double(count);
    r.mean[k] = at_or(shift, k, 0.0) + m1;
    r.var[k] = std::max(sums[c + k] / double(count) - m1 * m1, 0.0);
  }
  return r;
}

std::vector<double> reference_batchnorm_invstd(const std::vector<double>& var, double eps) {
  std::vector<double> r;
  for (double v : var) r.push_back(1.0 / std::sqrt(v + eps));
  return r;
}

std::vector<double> reference_batchnorm_normalize(const Tensor& x, const std::vector<double>& mean,
                                                  const std::vector<double>& invstd, const std::vector<double>& weight,
                                                  const std::vector<double>& bias) {
  const Planes p(x);
  std::vector<double> y = to_doubles(x);
  for (size_t i = 0; i < y.size(); ++i) {
    const size_t c = p.channel(i);
    y[i] = (y[i] - mean[c]) * invstd[c] * at_or(weight, c, 1.0) + at_or(bias, c, 0.0);
  }
  return y;
}

std::vector<double> reference_batchnorm_backward_sums(const Tensor& x, const Tensor& dy,
                                                      const std::vector<double>& mean,
                                                      const std::vector<double>& invstd) {
  const Planes p(x);
  const std::vector<double> xv = to_doubles(x), g = to_doubles(dy);
  std::vector<double> sums(size_t(2 * p.c), 0.0);
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = p.channel(i);
    sums[c] += g[i];
    sums[size_t(p.c) + c] += g[i] * (xv[i] - mean[c]) * invstd[c];
  }
  return sums;
}

std::vector<double> reference_batchnorm_backward_input(const Tensor& x, const Tensor& dy,
                                                       const std::vector<double>& mean,
                                                       const std::vector<double>& invstd,
                                                       const std::vector<double>& weight,
                                                       const std::vector<double>& sums, int64_t count, bool training) {
  const Planes p(x);
  const std::vector<double> xv = to_doubles(x), g = to_doubles(dy);
  std::vector<double> dx(xv.size());
  const double m = double(count);
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = p.channel(i);
    const double scale = at_or(weight, c, 1.0) * invstd[c];
    if (!training) {
      dx[i] = g[i] * scale;
      continue;
    }
    const double xhat = (xv[i] - mean[c]) * invstd[c];
    dx[i] = scale * (g[i] - sums[c] / m - xhat * sums[size_t(p.c) + c] / m);
  }
  return dx;
}

void reference_batchnorm_update_running(const BatchNormStats& batch, double momentum, std::vector<double>& running_mean,
                                        std::vector<double>& running_var) {
  const double n = double(batch.count);
  for (size_t c = 0; c < running_mean.size(); ++c) {
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * batch.mean[c];
    running_var[c] = (1 - momentum) * running_var[c] + momentum * batch.var[c] * n / (n - 1);  // unbiased
  }
}

}  // namespace gridnn::test
