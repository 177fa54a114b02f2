// CPU backend of kernels/pool3d.h: OpenMP loops over the bodies of kernels/pool3d_bodies.h
// (one iteration per output element forward, per input element backward; max pooling's
// backward scatters per plane, see below).
#include "kernels/pool3d.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

// Max pooling forward, one iteration per output row (nc, od, oh). The row's outputs are
// updated together: for each input row (id, ih) of the window and each tap e along w, every
// output ow compares x[id, ih, ow*sw - pw + e] with its running best, branch-free, in a loop
// over ow that the compiler vectorizes. Each output still sees its window's elements in
// body::max_pool_window's order (d, then h, then w) under the same rule (the first maximum
// wins, NaN beats numbers), so the values and argmaxes are those of the GPU's body.
// b[ow], a[ow] take x[ow * stride] (flat input index base + ow * stride) where it wins, for
// ow in [lo, hi). S is the stride when known at compile time (0: use `stride`), so the
// loads have a constant stride and the loop vectorizes.
template <class T, int S>
void max_pool_taps(const T* x, int64_t base, int64_t lo, int64_t hi, int64_t stride, float* b, int64_t* a) {
  const int64_t s = S ? S : stride;
  for (int64_t ow = lo; ow < hi; ++ow) {
    const float v = to_float(x[ow * s]);
    const float cur = b[ow];
    // Selects by masks, not branches: whether a tap wins is data-dependent and mispredicts.
    const int64_t take = -int64_t((v > cur) | ((v != v) & (cur == cur)));
    const uint32_t m = uint32_t(take);
    b[ow] = bits_float((float_bits(v) & m) | (float_bits(cur) & ~m));
    a[ow] = ((base + ow * s) & take) | (a[ow] & ~take);
  }
}

template <class T>
void max_pool_row(const T* plane, const Pool3dGeometry& g, int64_t od, int64_t oh, T* y, int64_t* argmax,
                  std::vector<float>& best, std::vector<int64_t>& at) {
  int64_t d0, d1, h0, h1;
  body::window_of(od, g.kd, g.sd, g.pd, g.d, &d0, &d1);
  body::window_of(oh, g.kh, g.sh, g.ph, g.h, &h0, &h1);
  best.assign(size_t(g.ow), bits_float(0xff800000u));  // -inf: the padding value
  at.resize(size_t(g.ow));
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    int64_t w0, w1;
    body::window_of(ow, g.kw, g.sw, g.pw, g.w, &w0, &w1);
    at[size_t(ow)] = (d0 * g.h + h0) * g.w + w0;
  }
  float* b = best.data();
  int64_t* a = at.data();
  const int64_t W = g.w, H = g.h, OW = g.ow, KW = g.kw, SW = g.sw, PW = g.pw;
  for (int64_t id = d0; id < d1; ++id)
    for (int64_t ih = h0; ih < h1; ++ih) {
      const int64_t row = (id * H + ih) * W;
      for (int64_t e = 0; e < KW; ++e) {
        // Outputs whose tap e lands inside the row: 0 <= ow*sw - pw + e < w.
        const int64_t first = PW - e;
        const int64_t lo = first <= 0 ? 0 : (first + SW - 1) / SW;
        const int64_t hi = std::min(OW, (W - 1 + PW - e) / SW + 1);
        const int64_t base = row - PW + e;
        if (SW == 2)
          max_pool_taps<T, 2>(plane + base, base, lo, hi, 2, b, a);
        else if (SW == 1)
          max_pool_taps<T, 1>(plane + base, base, lo, hi, 1, b, a);
        else
          max_pool_taps<T, 0>(plane + base, base, lo, hi, SW, b, a);
      }
    }
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    y[ow] = from_float<T>(b[ow]);
    argmax[ow] = a[ow];
  }
}

void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax) {
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "max_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    int64_t* idx = argmax.data<int64_t>();
    parallel_for(
        g.nc * g.od * g.oh,
        [&](int64_t r) {
          thread_local std::vector<float> best;
          thread_local std::vector<int64_t> at;
          const int64_t oh = r % g.oh, od = (r / g.oh) % g.od, nc = r / (g.oh * g.od);
          max_pool_row(in + nc * g.d * g.h * g.w, g, od, oh, out + r * g.ow, idx + r * g.ow, best, at);
        },
        g.ow * g.kd * g.kh * g.kw);
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
