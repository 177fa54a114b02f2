// 3D pooling bodies, written once for host and device (docs/design.md §3): max, average and the
// backward of global average pooling over [N, C, D, H, W] volumes.
//
// Forward bodies compute one output element; backward bodies compute one INPUT element
// as a gather over the output windows that contain it (in increasing od, oh, ow order),
// so the backward needs no atomics and adds in the same order on every run and backend.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/hd.h"

namespace gridnn::kernels {

// Geometry of one pooling: input [nc, d, h, w] (nc = N * C), output [nc, od, oh, ow],
// window k, stride s, padding p per spatial dimension (no dilation, floor mode).
struct Pool3dGeometry {
  int64_t nc, d, h, w;
  int64_t od, oh, ow;
  int64_t kd, kh, kw;
  int64_t sd, sh, sw;
  int64_t pd, ph, pw;
};

namespace body {

// Output positions o (along one dimension) whose window [o*s - p, o*s - p + k) holds input
// position i: o in [*lo, *hi] (empty when *lo > *hi).
GRIDNN_HD GRIDNN_INLINE void windows_holding(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out, int64_t* lo,
                                             int64_t* hi) {
  const int64_t first = i + p - k + 1;  // smallest o*s that still reaches i
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  const int64_t last = (i + p) / s;
  *hi = last < out - 1 ? last : out - 1;
}

// Clipped window of output position o along one dimension: input positions [*b, *e).
GRIDNN_HD GRIDNN_INLINE void window_of(int64_t o, int64_t k, int64_t s, int64_t p, int64_t in, int64_t* b, int64_t* e) {
  const int64_t start = o * s - p;
  *b = start < 0 ? 0 : start;
  *e = start + k < in ? start + k : in;
}

// Max pooling, output element o: y[o] and the argmax as a flat index into the input's
// d*h*w volume (PyTorch's convention). Ties go to the first maximum in window order
// (d, then h, then w); NaN wins over numbers, as in PyTorch.
template <class T>
GRIDNN_HD GRIDNN_INLINE void max_pool_window(const T* plane, const Pool3dGeometry& g, int64_t d0, int64_t d1,
                                             int64_t h0, int64_t h1, int64_t w0, int64_t w1, T* y, int64_t* argmax) {
  float best = bits_float(0xff800000u);  // -inf: the padding value
  int64_t best_at = (d0 * g.h + h0) * g.w + w0;
  for (int64_t id = d0; id < d1; ++id)
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const int64_t at = (id * g.h + ih) * g.w + iw;
        const float v = to_float(plane[at]);
        if (v > best || (v != v && best == best)) {
          best = v;
          best_at = at;
        }
      }
  *y = from_float<T>(best);
  *argmax = best_at;
}

template <class T>
GRIDNN_HD GRIDNN_INLINE void max_pool_at(int64_t o, const T* x, const Pool3dGeometry& g, T* y, int64_t* argmax) {
  const int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, od = (o / (g.ow * g.oh)) % g.od;
  const int64_t nc = o / (g.ow * g.oh * g.od);
  int64_t d0, d1, h0, h1, w0, w1;
  window_of(od, g.kd, g.sd, g.pd, g.d, &d0, &d1);
  window_of(oh, g.kh, g.sh, g.ph, g.h, &h0, &h1);
  window_of(ow, g.kw, g.sw, g.pw, g.w, &w0, &w1);
  max_pool_window(x + nc * g.d * g.h * g.w, g, d0, d1, h0, h1, w0, w1, y + o, argmax + o);
}

// Calls f(o) for every output o (flat index into all outputs) whose window holds input
// element i, in increasing order of o: the order both pooling backwards add in.
template <class F>
GRIDNN_HD GRIDNN_INLINE void for_each_window_holding(int64_t i, const Pool3dGeometry& g, F f) {
  const int64_t iw = i % g.w, ih = (i / g.w) % g.h, id = (i / (g.w * g.h)) % g.d;
  const int64_t nc = i / (g.w * g.h * g.d);
  int64_t d0, d1, h0, h1, w0, w1;
  windows_holding(id, g.kd, g.sd, g.pd, g.od, &d0, &d1);
  windows_holding(ih, g.kh, g.sh, g.ph, g.oh, &h0, &h1);
  windows_holding(iw, g.kw, g.sw, g.pw, g.ow, &w0, &w1);
  const int64_t base = nc * g.od * g.oh * g.ow;
  for (int64_t od = d0; od <= d1; ++od)
    for (int64_t oh = h0; oh <= h1; ++oh)
      for (int64_t ow = w0; ow <= w1; ++ow) f(base + (od * g.oh + oh) * g.ow + ow);
}

// Max pooling backward, input element i: the sum of dy over the windows whose argmax is i.
template <class T>
GRIDNN_HD GRIDNN_INLINE void max_pool_backward_at(int64_t i, const T* dy, const int64_t* argmax,
                                                  const Pool3dGeometry& g, T* dx) {
  const int64_t self = i % (g.d * g.h * g.w);  // argmax indexes one input volume
  float acc = 0.0f;
  for_each_window_holding(i, g, [&](int64_t o) {
    if (argmax[o] == self) acc += to_float(dy[o]);
  });
  dx[i] = from_float<T>(acc);
}

// Average pooling with count_include_pad = true: every window divides by its full volume
// kd*kh*kw (in floor mode no window reaches past the padding, so this is PyTorch's divisor).
template <class T>
GRIDNN_HD GRIDNN_INLINE void avg_pool_at(int64_t o, const T* x, const Pool3dGeometry& g, T* y) {
  const int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, od = (o / (g.ow * g.oh)) % g.od;
  const int64_t nc = o / (g.ow * g.oh * g.od);
  int64_t d0, d1, h0, h1, w0, w1;
  window_of(od, g.kd, g.sd, g.pd, g.d, &d0, &d1);
  window_of(oh, g.kh, g.sh, g.ph, g.h, &h0, &h1);
  window_of(ow, g.kw, g.sw, g.pw, g.w, &w0, &w1);
  const T* plane = x + nc * g.d * g.h * g.w;
  float acc = 0.0f;
  for (int64_t id = d0; id < d1; ++id)
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) acc += to_float(plane[(id * g.h + ih) * g.w + iw]);
  y[o] = from_float<T>(acc / float(g.kd * g.kh * g.kw));
}

// Average pooling backward, input element i: sum of dy over the windows holding i, divided
// by the window volume.
template <class T>
GRIDNN_HD GRIDNN_INLINE void avg_pool_backward_at(int64_t i, const T* dy, const Pool3dGeometry& g, T* dx) {
  float acc = 0.0f;
  for_each_window_holding(i, g, [&](int64_t o) { acc += to_float(dy[o]); });
  dx[i] = from_float<T>(acc / float(g.kd * g.kh * g.kw));
}

// Global average pooling backward, input element i of [nc, volume]: dy[nc] / volume.
template <class T>
GRIDNN_HD GRIDNN_INLINE void global_avg_pool_backward_at(int64_t i, const T* dy, int64_t volume, T* dx) {
  dx[i] = from_float<T>(to_float(dy[i / volume]) / float(volume));
}

}  // namespace body
}  // namespace gridnn::kernels
