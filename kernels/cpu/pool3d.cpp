// CPU backend of kernels/pool3d.h: OpenMP loops over the bodies of kernels/pool3d_bodies.h
// (one iteration per output element forward, per input element backward; max pooling's
// backward scatters per plane, see below).
#include "kernels/pool3d.h"

#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

// One iteration per output row (nc, od, oh): the window's depth and height bounds are
// computed once per row rather than per output (the per-element divisions cost more than
// the 27 comparisons of a 3x3x3 window). The same body, so the same bits as max_pool_at.
void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax) {
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "max_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    int64_t* idx = argmax.data<int64_t>();
    parallel_for(
        g.nc * g.od * g.oh,
        [&](int64_t row) {
          const int64_t oh = row % g.oh, od = (row / g.oh) % g.od, nc = row / (g.oh * g.od);
          int64_t d0, d1, h0, h1;
          body::window_of(od, g.kd, g.sd, g.pd, g.d, &d0, &d1);
          body::window_of(oh, g.kh, g.sh, g.ph, g.h, &h0, &h1);
          const scalar_t* plane = in + nc * g.d * g.h * g.w;
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            int64_t w0, w1;
            body::window_of(ow, g.kw, g.sw, g.pw, g.w, &w0, &w1);
            body::max_pool_window(plane, g, d0, d1, h0, h1, w0, w1, out + row * g.ow + ow, idx + row * g.ow + ow);
          }
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
void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dGeometry& g,
                         Tensor& dx) {
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
    parallel_for(dx.numel(),
                 [&](int64_t i) { body::global_avg_pool_backward_at(i, d, volume, out); });
  });
}

}  // namespace gridnn::kernels::cpu
