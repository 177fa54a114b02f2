// Backward filter of a convolution with one input channel (a network's stem on a scan's single
// intensity channel) in a fixed order, the arithmetic shared by the CPU's driver
// (kernels/cpu/conv3d_one_channel.h, backward_filter_by_tiles) and the CUDA kernel
// (kernels/cuda/conv3d_one_channel.cu), so that both give the same bits (docs/design.md §3).
//
// For x [N, 1, D, H, W] and dy [N, O, Do, Ho, Wo], in two passes:
//   pass 1  per tile (sample n, output depth plane od) and filter tap (o, a, b, c): the
//           partial  sum over the plane's outputs (oh, ow) in row-major order of
//           dy[n, o, od, oh, ow] * x[n, 0, od sd + a - pd, oh sh + b - ph, ow sw + c - pw],
//           one fmaf per output, into a float started at +0;
//   pass 2  dw[o, 0, a, b, c] += the tiles' partials of the tap added in tile order
//           (n, then od), into a float started at +0.
// An input index in the padding reads 0: the fmaf then adds dy * 0, which leaves a sum
// started at +0 unchanged for finite dy (round to nearest never makes such a sum -0), so it
// is the same as skipping the output; both backends add it, the CUDA kernel from zeros
// staged around the input, and agree bit for bit for any dy.
// Partials are stored per tile, tap-major: partial[tile][o kd kh kw + tap], with
// tile = n Do + od and tap = (a kh + b) kw + c.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"
#include "kernels/conv3d_bodies.h"

namespace gridnn::kernels::one_channel {

// The geometries the kernel takes: one input channel, a kernel that is not pointwise, and
// at least one output voxel.
GRIDNN_HD GRIDNN_INLINE bool takes(const Conv3dGeometry& g) {
  return g.in_channels == 1 && !g.is_pointwise() && g.out_volume() > 0;
}
// Tiles of a batch of n, and the partials of one tile (one per filter element).
GRIDNN_HD GRIDNN_INLINE int64_t tiles(const Conv3dGeometry& g, int64_t n) { return n * g.out_size[0]; }
GRIDNN_HD GRIDNN_INLINE int64_t partials_per_tile(const Conv3dGeometry& g) {
  return g.out_channels * g.kernel_volume();
}

namespace body {

// x[id, ih, iw] of one sample's single channel xn [D, H, W], or 0 in the padding.
GRIDNN_HD GRIDNN_INLINE float input_or_zero(const float* xn, const Conv3dGeometry& g, int64_t id, int64_t ih,
                                            int64_t iw) {
  if (id < 0 || id >= g.in_size[0] || ih < 0 || ih >= g.in_size[1] || iw < 0 || iw >= g.in_size[2]) return 0.0f;
  return xn[(id * g.in_size[1] + ih) * g.in_size[2] + iw];
}

// Pass 1: the partial of filter element e = o kd kh kw + tap for tile (n, od), from x and dy
// of the whole batch.
GRIDNN_HD GRIDNN_INLINE float partial(const float* x, const float* dy, const Conv3dGeometry& g, int64_t n, int64_t od,
                                      int64_t e) {
  const int64_t kvol = g.kernel_volume(), o = e / kvol, tap = e % kvol;
  const int64_t c = tap % g.kernel[2], b = (tap / g.kernel[2]) % g.kernel[1], a = tap / (g.kernel[2] * g.kernel[1]);
  const int64_t Ho = g.out_size[1], Wo = g.out_size[2];
  const float* xn = x + n * g.in_volume();
  const float* plane = dy + ((n * g.out_channels + o) * g.out_size[0] + od) * Ho * Wo;
  const int64_t id = od * g.stride[0] + a - g.padding[0];
  float acc = 0.0f;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const int64_t ih = oh * g.stride[1] + b - g.padding[1];
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const int64_t iw = ow * g.stride[2] + c - g.padding[2];
      acc = fmaf(plane[oh * Wo + ow], input_or_zero(xn, g, id, ih, iw), acc);
    }
  }
  return acc;
}

// Pass 2: the sum of filter element e's partials over `count` tiles, in tile order.
GRIDNN_HD GRIDNN_INLINE float total(const float* partials, int64_t count, int64_t per_tile, int64_t e) {
  float sum = 0.0f;
  for (int64_t t = 0; t < count; ++t) sum += partials[t * per_tile + e];
  return sum;
}

}  // namespace body
}  // namespace gridnn::kernels::one_channel
