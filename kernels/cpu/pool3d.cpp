// CPU backend of kernels/pool3d.h: OpenMP loops over the bodies of kernels/pool3d_bodies.h
// (one iteration per output element forward, per input element backward), except max
// pooling, whose forward runs separably and whose backward scatters, per plane (see below).
#include "kernels/pool3d.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

// Max pooling forward, one plane (n, c) at a time, separably: the maximum over each input
// row's w-windows, then over the h-windows of those, then over the d-windows of those.
// Each stage keeps the first maximum it meets in increasing position (the strict `wins`
// below), so the maximum found is the first in body::max_pool_window's order (d, then h,
// then w) and the values and argmaxes are those of the GPU's body. Per output that is
// kw + kh + kd comparisons where the window has kd*kh*kw elements, in loops over ow that
// the compiler vectorizes.

// Whether v replaces the running best `cur`: larger, or NaN over a number. As a mask of
// all ones or zeros: whether a tap wins is data-dependent and mispredicts as a branch.
inline uint32_t wins(float v, float cur) { return -uint32_t((v > cur) | ((v != v) & (cur == cur))); }

inline void keep_best(float v, int32_t at, float& best, int32_t& best_at) {
  const uint32_t m = wins(v, best);
  best = bits_float((float_bits(v) & m) | (float_bits(best) & ~m));
  best_at = int32_t((uint32_t(at) & m) | (uint32_t(best_at) & ~m));
}

// Stage 1 over one input row x[0, w): b[ow], a[ow] (w index) for ow in [0, OW). S is the
// stride when known at compile time (0: g.sw), so the taps' loads have a constant stride.
template <class T, int S>
void max_pool_row_w(const T* x, const Pool3dGeometry& g, const int32_t* w0, float* b, int32_t* a) {
  const int64_t s = S ? S : g.sw;
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    b[ow] = bits_float(0xff800000u);  // -inf: the padding value
    a[ow] = w0[ow];
  }
  for (int64_t e = 0; e < g.kw; ++e) {
    // Outputs whose tap e lands inside the row: 0 <= ow*s - pw + e < w.
    const int64_t first = g.pw - e;
    const int64_t lo = first <= 0 ? 0 : (first + s - 1) / s;
    const int64_t hi = std::min(g.ow, (g.w - 1 + g.pw - e) / s + 1);
    const int64_t shift = e - g.pw;
    for (int64_t ow = lo; ow < hi; ++ow) keep_best(to_float(x[ow * s + shift]), int32_t(ow * s + shift), b[ow], a[ow]);
  }
}

// Stages 2 and 3: out[o][ow] = the best of in[i][ow] over the window of o along a dimension
// of `n` positions (k, s, p), for o < `outs`; the index is i * `step` + the input's.
void max_pool_stage(const float* in, const int32_t* in_at, int64_t n, int64_t outs, int64_t k, int64_t s, int64_t p,
                    int64_t row, int64_t step, float* out, int32_t* out_at) {
  for (int64_t o = 0; o < outs; ++o) {
    int64_t i0, i1;
    body::window_of(o, k, s, p, n, &i0, &i1);
    float* b = out + o * row;
    int32_t* a = out_at + o * row;
    for (int64_t j = 0; j < row; ++j) {
      b[j] = bits_float(0xff800000u);
      a[j] = int32_t(i0 * step) + in_at[i0 * row + j];
    }
    for (int64_t i = i0; i < i1; ++i) {
      const float* v = in + i * row;
      const int32_t* at = in_at + i * row;
      const int32_t base = int32_t(i * step);
      for (int64_t j = 0; j < row; ++j) keep_best(v[j], base + at[j], b[j], a[j]);
    }
  }
}

void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax) {
  if (g.d * g.h * g.w > INT32_MAX)
    throw Error("max_pool3d: a plane of " + std::to_string(g.d * g.h * g.w) +
                " elements is more than 2^31 - 1; split the volume over the grid's rows");
  std::vector<int32_t> w0(size_t(g.ow));
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    int64_t b, e;
    body::window_of(ow, g.kw, g.sw, g.pw, g.w, &b, &e);
    w0[size_t(ow)] = int32_t(b);
  }
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "max_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    int64_t* idx = argmax.data<int64_t>();
    const int64_t rows_w = g.d * g.h * g.ow, rows_h = g.d * g.oh * g.ow, outs = g.od * g.oh * g.ow;
    parallel_for(
        g.nc,
        [&](int64_t p) {
          thread_local std::vector<float> b1, b2, b3;
          thread_local std::vector<int32_t> a1, a2, a3;
          b1.resize(size_t(rows_w)), a1.resize(size_t(rows_w));
          b2.resize(size_t(rows_h)), a2.resize(size_t(rows_h));
          b3.resize(size_t(outs)), a3.resize(size_t(outs));
          const scalar_t* plane = in + p * g.d * g.h * g.w;
          for (int64_t r = 0; r < g.d * g.h; ++r) {
            const scalar_t* row = plane + r * g.w;
            float* b = b1.data() + r * g.ow;
            int32_t* a = a1.data() + r * g.ow;
            if (g.sw == 2)
              max_pool_row_w<scalar_t, 2>(row, g, w0.data(), b, a);
            else if (g.sw == 1)
              max_pool_row_w<scalar_t, 1>(row, g, w0.data(), b, a);
            else
              max_pool_row_w<scalar_t, 0>(row, g, w0.data(), b, a);
          }
          for (int64_t id = 0; id < g.d; ++id)
            max_pool_stage(b1.data() + id * g.h * g.ow, a1.data() + id * g.h * g.ow, g.h, g.oh, g.kh, g.sh, g.ph, g.ow,
                           g.w, b2.data() + id * g.oh * g.ow, a2.data() + id * g.oh * g.ow);
          max_pool_stage(b2.data(), a2.data(), g.d, g.od, g.kd, g.sd, g.pd, g.oh * g.ow, g.h * g.w, b3.data(),
                         a3.data());
          scalar_t* yp = out + p * outs;
          int64_t* ap = idx + p * outs;
          for (int64_t o = 0; o < outs; ++o) {
            yp[o] = from_float<scalar_t>(b3[size_t(o)]);
            ap[o] = a3[size_t(o)];
          }
        },
        g.d * g.h * g.w * (g.kw + g.kh + g.kd));
  });
}

// Max pooling backward on the CPU scatters instead of gathering: per (n, c) plane, each
// output's dy is added to its argmax in increasing output order, into a float buffer. That
// is exactly the order (and fp32 accumulation) in which the CUDA backend's gather,
// body::max_pool_backward_at, adds the same terms, so both give the same bits, and the CPU
// makes one pass over the outputs instead of a window search per input element
// (bench/RESULTS.md: 17.6 ms -> 0.21 ms for the 64^3 stem).
void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dGeometry& g, Tensor& dx) {
  const int64_t in_plane = g.d * g.h * g.w, out_plane = g.od * g.oh * g.ow;
  if (dx.numel() == 0) return;
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "max_pool3d_backward", [&] {
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    const int64_t* idx = argmax.data<int64_t>();
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(
        g.nc,
        [&](int64_t p) {
          thread_local std::vector<float> acc;
          acc.assign(size_t(in_plane), 0.0f);
          const int64_t* at = idx + p * out_plane;
          const scalar_t* dyp = d + p * out_plane;
          for (int64_t o = 0; o < out_plane; ++o) acc[size_t(at[o])] += to_float(dyp[o]);
          scalar_t* dxp = out + p * in_plane;
          for (int64_t i = 0; i < in_plane; ++i) dxp[i] = from_float<scalar_t>(acc[size_t(i)]);
        },
        in_plane + out_plane);
  });
}

void avg_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y) {
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "avg_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    parallel_for(
        y.numel(), [&](int64_t o) { body::avg_pool_at(o, in, g, out); }, g.kd * g.kh * g.kw);
  });
}

void avg_pool3d_backward(const Tensor& dy, const Pool3dGeometry& g, Tensor& dx) {
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "avg_pool3d_backward", [&] {
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(
        dx.numel(), [&](int64_t i) { body::avg_pool_backward_at(i, d, g, out); }, 8);
  });
}

void global_avg_pool3d_backward(const Tensor& dy, int64_t volume, Tensor& dx) {
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "global_avg_pool3d_backward", [&] {
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(dx.numel(), [&](int64_t i) { body::global_avg_pool_backward_at(i, d, volume, out); });
  });
}

}  // namespace gridnn::kernels::cpu
