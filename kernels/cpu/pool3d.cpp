// CPU backend of kernels/pool3d.h: OpenMP loops over the bodies of kernels/pool3d_bodies.h
// (one iteration per output element forward, per input element backward), except max
// pooling, whose forward runs separably and whose backward scatters, per plane (see below).
#include "kernels/pool3d.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
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
// kw + kh + kd comparisons where the window has kd*kh*kw elements.
//
// Stage 1 first splits a depth slice's rows by stride phase (phase r holds the padded row's
// positions j*sw + r, -inf outside the row), so that tap e of every output is a contiguous
// load, and runs each tap as one loop over the whole slice that the compiler vectorizes.
// -inf never wins against the running best, which starts at -inf, so the padding never
// becomes an argmax, as in the body. Where the rows split evenly into phases (the stem's
// even widths), the split and the taps run over the whole slice at once
// (max_pool_w_slice), not row by row.
//
// Stages 2 and 3 run on rows padded to a multiple of kRowAlign outputs: the lanes past ow
// compute values nobody reads, so that no row ends in a scalar remainder loop (ow is 12 for
// the stem of a 48-wide input, and 8 + 4 scalar steps cost about what three vectors do).
// bench/RESULTS.md has the timings.

// Whether v replaces the running best `cur`: larger, or NaN over a number. As a mask of
// all ones or zeros: whether a tap wins is data-dependent and mispredicts as a branch.
inline uint32_t wins(float v, float cur) { return -uint32_t((v > cur) | ((v != v) & (cur == cur))); }

inline void keep_best(float v, int32_t at, float& best, int32_t& best_at) {
  const uint32_t m = wins(v, best);
  best = bits_float((float_bits(v) & m) | (float_bits(best) & ~m));
  best_at = int32_t((uint32_t(at) & m) | (uint32_t(best_at) & ~m));
}

constexpr uint32_t kMinusInfinity = 0xff800000u;  // the padding value
constexpr int64_t kRowAlign = 16;                 // floats in an AVX-512 vector

// Per-plane scratch of one thread: stage 1's phases and results for one depth slice
// ([h rows][j] each), stage 2's ([d][oh][ow padded]) and stage 3's ([od][oh][ow padded]).
struct MaxPoolScratch {
  std::vector<float> phases, b1, b2, b3;
  std::vector<int32_t> a1, a2, a3;
};

// Phase r of one row: ph[j] = x[j*S + r - pw], -inf outside the row, for j < row_len. S is
// the stride when known at compile time (0: g.sw), so the loads have a constant stride.
template <class T, int S>
void phase_of_row(const T* x, const Pool3dGeometry& g, int64_t r, int64_t row_len, float* ph) {
  const int64_t s = S ? S : g.sw, shift = r - g.pw;
  // Inside the row: 0 <= j*s + shift < w.
  const int64_t lo = std::min(row_len, shift >= 0 ? 0 : (-shift + s - 1) / s);
  const int64_t hi = std::max(lo, std::min(row_len, g.w - shift > 0 ? (g.w - shift + s - 1) / s : 0));
  for (int64_t j = 0; j < lo; ++j) ph[j] = bits_float(kMinusInfinity);
  for (int64_t j = lo; j < hi; ++j) ph[j] = to_float(x[j * s + shift]);
  for (int64_t j = hi; j < row_len; ++j) ph[j] = bits_float(kMinusInfinity);
}

// Stage 1 on the h rows of one depth slice: b1[row][j], a1[row][j] = the best of the row's
// w-window of output j, for j < ow (entries up to `row_len` are computed and unused), and
// the winning tap e (for a window of -inf, its first tap inside the row, e0[j]).
template <class T>
void max_pool_w(const T* slice, const Pool3dGeometry& g, int64_t row_len, const int32_t* e0, MaxPoolScratch& s) {
  const int64_t n = g.h * row_len, S = g.sw;
  s.phases.resize(size_t(S * n));
  s.b1.resize(size_t(n));
  s.a1.resize(size_t(n));
  for (int64_t r = 0; r < S; ++r)
    for (int64_t row = 0; row < g.h; ++row) {
      float* ph = s.phases.data() + r * n + row * row_len;
      if (S == 2)
        phase_of_row<T, 2>(slice + row * g.w, g, r, row_len, ph);
      else if (S == 1)
        phase_of_row<T, 1>(slice + row * g.w, g, r, row_len, ph);
      else
        phase_of_row<T, 0>(slice + row * g.w, g, r, row_len, ph);
    }
  float* b = s.b1.data();
  int32_t* a = s.a1.data();
  for (int64_t row = 0; row < g.h; ++row)
    for (int64_t j = 0; j < row_len; ++j) {
      b[row * row_len + j] = bits_float(kMinusInfinity);
      a[row * row_len + j] = e0[j];
    }
  for (int64_t e = 0; e < g.kw; ++e) {
    const float* v = s.phases.data() + (e % S) * n + e / S;
    const int32_t tap = int32_t(e);
    for (int64_t f = 0; f < n - e / S; ++f) keep_best(v[f], tap, b[f], a[f]);
  }
}

// Stage 1 over a whole slice, where every row splits evenly into the stride's phases
// (w % sw == 0) and its outputs fit in one phase's row (ow <= w / sw): the same b1 and a1 as
// max_pool_w, with rows of w / sw entries, from long loops over the slice instead of short
// ones per row. Phase r holds the slice's positions q*S + r in flat order (row `row`: its
// entries [row * w/S, (row + 1) * w/S)). Tap e of output j reads row position j*S + e - pw:
// phase r, entry j + q of the row; where that is outside the row (column j < -q or
// j >= w/S - q) it reads -inf instead, as the padding does in max_pool_w. Each tap is one
// loop over all the slice's outputs (`column` and `first`: each output's column and first
// tap inside its row, e0).
template <class T>
void max_pool_w_slice(const T* slice, const Pool3dGeometry& g, const int32_t* first, const int32_t* column,
                      MaxPoolScratch& s) {
  const int64_t S = g.sw, n_row = g.w / S, n = g.h * n_row;
  s.phases.resize(size_t(S * n));
  s.b1.resize(size_t(n + kRowAlign));  // stage 2 reads ow padded to kRowAlign of the last row
  s.a1.resize(size_t(n + kRowAlign));
  float* ph = s.phases.data();
  for (int64_t r = 0; r < S; ++r)
    if (S == 2)
      for (int64_t q = 0; q < n; ++q) ph[r * n + q] = to_float(slice[q * 2 + r]);
    else
      for (int64_t q = 0; q < n; ++q) ph[r * n + q] = to_float(slice[q * S + r]);
  float* b = s.b1.data();
  int32_t* a = s.a1.data();
  for (int64_t f = 0; f < n; ++f) {
    b[f] = bits_float(kMinusInfinity);
    a[f] = first[f];
  }
  for (int64_t e = 0; e < g.kw; ++e) {
    const int64_t off = e - g.pw, r = ((off % S) + S) % S, q = (off - r) / S;
    const float* v = ph + r * n + q;
    const int32_t tap = int32_t(e), lo = int32_t(-q), hi = int32_t(n_row - q);
    const int64_t f0 = std::max<int64_t>(0, -q), f1 = std::min(n, n - q);  // v[f] inside the phase
    if (q == 0) {
      for (int64_t f = f0; f < f1; ++f) keep_best(v[f], tap, b[f], a[f]);
    } else {
      for (int64_t f = f0; f < f1; ++f) {
        const uint32_t inside = -uint32_t((column[f] >= lo) & (column[f] < hi));
        keep_best(bits_float((float_bits(v[f]) & inside) | (kMinusInfinity & ~inside)), tap, b[f], a[f]);
      }
    }
  }
}

// Stages 2 and 3: out[o][j] = the best of in[i][j] (rows `in_row` apart) over the window of
// o along a dimension of `n` positions (k, s, p), for o < `outs` and j < `row` (a multiple
// of kRowAlign); its index is i * `step` + col[j] + the input's. Each vector of kRowAlign
// lanes keeps its best in registers through the window and is stored once: stored and
// loaded again per window row, the blended (masked) store of the argmax stalled the next
// load of it.
void max_pool_stage(const float* in, const int32_t* in_at, int64_t in_row, int64_t n, int64_t outs, int64_t k,
                    int64_t s, int64_t p, int64_t row, int64_t step, const int32_t* col, float* out, int32_t* out_at) {
  for (int64_t o = 0; o < outs; ++o) {
    int64_t i0, i1;
    body::window_of(o, k, s, p, n, &i0, &i1);
    for (int64_t j0 = 0; j0 < row; j0 += kRowAlign) {
      float b[kRowAlign];
      int32_t a[kRowAlign];
      for (int64_t l = 0; l < kRowAlign; ++l) {
        b[l] = bits_float(kMinusInfinity);
        a[l] = int32_t(i0 * step) + col[j0 + l] + in_at[i0 * in_row + j0 + l];
      }
      for (int64_t i = i0; i < i1; ++i) {
        const float* v = in + i * in_row + j0;
        const int32_t* at = in_at + i * in_row + j0;
        const int32_t base = int32_t(i * step);
        for (int64_t l = 0; l < kRowAlign; ++l) keep_best(v[l], base + col[j0 + l] + at[l], b[l], a[l]);
      }
      std::memcpy(out + o * row + j0, b, sizeof b);  // a loop here stored lane by lane
      std::memcpy(out_at + o * row + j0, a, sizeof a);
    }
  }
}

void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax) {
  if (g.d * g.h * g.w > INT32_MAX)
    throw Error("max_pool3d: a plane of " + std::to_string(g.d * g.h * g.w) +
                " elements is more than 2^31 - 1; split the volume over the grid's rows");
  // Stages 2 and 3's row: ow outputs padded to kRowAlign. Stage 1's row: that, and room for
  // the last output's taps in each phase.
  const int64_t ow_pad = (g.ow + kRowAlign - 1) / kRowAlign * kRowAlign;
  const int64_t row_len = std::max(ow_pad, g.ow + (g.kw - 1) / g.sw);
  // Stage 1 over whole slices (max_pool_w_slice) where the rows split evenly into phases.
  const bool whole_slice = g.w % g.sw == 0 && g.ow <= g.w / g.sw;
  // e0[j]: output j's first tap inside the row; col[j]: the row position of its tap 0 (the
  // padding lanes' are 0: their argmaxes are never read).
  std::vector<int32_t> e0(size_t(std::max(row_len, g.w / g.sw)), 0), col(size_t(ow_pad), 0);
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    e0[size_t(ow)] = int32_t(std::max<int64_t>(0, g.pw - ow * g.sw));
    col[size_t(ow)] = int32_t(ow * g.sw - g.pw);
  }
  const int64_t plane_pad = g.oh * ow_pad;                 // stage 2's output per depth slice
  const std::vector<int32_t> zeros(size_t(plane_pad), 0);  // stage 3 adds no offset within a slice
  // max_pool_w_slice's column of each output of a slice and that output's first tap inside
  // the row (e0).
  const int64_t slice_outs = whole_slice ? g.h * (g.w / g.sw) : 0;
  std::vector<int32_t> column(static_cast<size_t>(slice_outs)), first(static_cast<size_t>(slice_outs));
  for (int64_t f = 0; f < slice_outs; ++f) {
    column[size_t(f)] = int32_t(f % (g.w / g.sw));
    first[size_t(f)] = e0[size_t(column[size_t(f)])];
  }
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "max_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    int64_t* idx = argmax.data<int64_t>();
    const int64_t outs = g.od * g.oh * g.ow;
    parallel_for(
        g.nc,
        [&](int64_t p) {
          thread_local MaxPoolScratch s;
          s.b2.resize(size_t(g.d * plane_pad)), s.a2.resize(size_t(g.d * plane_pad));
          s.b3.resize(size_t(g.od * plane_pad)), s.a3.resize(size_t(g.od * plane_pad));
          for (int64_t id = 0; id < g.d; ++id) {
            const scalar_t* slice = in + (p * g.d + id) * g.h * g.w;
            if (whole_slice)
              max_pool_w_slice(slice, g, first.data(), column.data(), s);
            else
              max_pool_w(slice, g, row_len, e0.data(), s);
            const int64_t out_at = id * plane_pad;
            max_pool_stage(s.b1.data(), s.a1.data(), whole_slice ? g.w / g.sw : row_len, g.h, g.oh, g.kh, g.sh, g.ph,
                           ow_pad, g.w, col.data(), s.b2.data() + out_at, s.a2.data() + out_at);
          }
          max_pool_stage(s.b2.data(), s.a2.data(), plane_pad, g.d, g.od, g.kd, g.sd, g.pd, plane_pad, g.h * g.w,
                         zeros.data(), s.b3.data(), s.a3.data());
          scalar_t* yp = out + p * outs;
          int64_t* ap = idx + p * outs;
          for (int64_t r = 0; r < g.od * g.oh; ++r)  // the rows' first ow lanes
            for (int64_t j = 0; j < g.ow; ++j) {
              yp[r * g.ow + j] = from_float<scalar_t>(s.b3[size_t(r * ow_pad + j)]);
              ap[r * g.ow + j] = s.a3[size_t(r * ow_pad + j)];
            }
        },
        g.d * g.h * g.w * (g.kw + g.kh + g.kd));
  });
}

// Max pooling backward on the CPU scatters instead of gathering: per (n, c) plane, each
// output's dy is added to its argmax in increasing output order, into a float buffer (dx
// itself when it is float, else a scratch plane converted after). That is exactly the order
// (and fp32 accumulation) in which the CUDA backend's gather, body::max_pool_backward_at,
// adds the same terms, so both give the same bits, and the CPU makes one pass over the
// outputs instead of a window search per input element (bench/RESULTS.md: 17.6 ms ->
// 0.21 ms for the 64^3 stem).
template <class T>
void scatter_plane(const int64_t* at, const T* dy, int64_t outs, int64_t ins, T* dx) {
  thread_local std::vector<float> acc;
  acc.assign(size_t(ins), 0.0f);
  for (int64_t o = 0; o < outs; ++o) acc[size_t(at[o])] += to_float(dy[o]);
  for (int64_t i = 0; i < ins; ++i) dx[i] = from_float<T>(acc[size_t(i)]);
}
void scatter_plane(const int64_t* at, const float* dy, int64_t outs, int64_t ins, float* dx) {
  std::fill_n(dx, ins, 0.0f);
  for (int64_t o = 0; o < outs; ++o) dx[at[o]] += dy[o];
}

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
          const int64_t* at = idx + p * out_plane;
          const scalar_t* dyp = d + p * out_plane;
          scatter_plane(at, dyp, out_plane, in_plane, out + p * in_plane);
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
