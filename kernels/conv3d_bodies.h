// 3D convolution geometry and the vol2col / col2vol index bodies (docs/design.md §3).
//
// The CPU backend lowers a convolution to GEMM: vol2col copies, for one sample, every
// input value each output voxel reads into a column matrix
//   col[row, p],  row = ((c * kd + a) * kh + b) * kw + e   (channel, kernel tap)
//                 p   = (od * Ho + oh) * Wo + ow           (output voxel)
// so that y = W [out, C*kd*kh*kw] * col. The columns are built and consumed in slabs of
// whole output depth planes [od0, od1) so the buffer stays small for large volumes.
// col2vol is the adjoint: each input row (c, id, ih) collects, on one thread, the column
// entries that read it, in a fixed order (taps a, b, e ascending); rows are disjoint, so
// there are no atomics and backward data is deterministic.
//
// The bodies are GRIDNN_HD so a CUDA loop could run them too; the CUDA backend uses cuDNN.
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace gridnn::kernels {

// One convolution (the batch size is not part of it). Dimension order: [0] = depth,
// [1] = height, [2] = width. Built and checked by ops::conv3d_geometry (kernels/conv3d.h).
struct Conv3dGeometry {
  int64_t in_channels = 0, out_channels = 0;
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t padding[3] = {0, 0, 0};
  int64_t in_size[3] = {0, 0, 0};   // D, H, W
  int64_t out_size[3] = {0, 0, 0};  // Do, Ho, Wo = (in + 2 p - k) / s + 1

  GRIDNN_HD int64_t kernel_volume() const { return kernel[0] * kernel[1] * kernel[2]; }
  GRIDNN_HD int64_t in_volume() const { return in_size[0] * in_size[1] * in_size[2]; }
  GRIDNN_HD int64_t out_volume() const { return out_size[0] * out_size[1] * out_size[2]; }
  GRIDNN_HD int64_t out_plane() const { return out_size[1] * out_size[2]; }
  // Rows of the column matrix: the GEMM's inner dimension.
  GRIDNN_HD int64_t col_rows() const { return in_channels * kernel_volume(); }
  // A 1x1x1 kernel, stride 1, no padding: the input already is the column matrix.
  GRIDNN_HD bool is_pointwise() const {
    for (int d = 0; d < 3; ++d)
      if (kernel[d] != 1 || stride[d] != 1 || padding[d] != 0) return false;
    return true;
  }
};

namespace body {

// Row `row` of the column matrix of one sample x [C, D, H, W], for output depth planes
// [od0, od1): col_row[(od - od0) * Ho * Wo + oh * Wo + ow] = x at the tapped voxel, or 0 in
// the padding.
template <class T>
GRIDNN_HD GRIDNN_INLINE void vol2col_row(const T* x, const Conv3dGeometry& g, int64_t row, int64_t od0, int64_t od1,
                                         T* col_row) {
  const int64_t e = row % g.kernel[2];
  const int64_t b = (row / g.kernel[2]) % g.kernel[1];
  const int64_t a = (row / (g.kernel[2] * g.kernel[1])) % g.kernel[0];
  const int64_t c = row / g.kernel_volume();
  const int64_t D = g.in_size[0], H = g.in_size[1], W = g.in_size[2];
  const T* xc = x + c * D * H * W;
  int64_t p = 0;
  for (int64_t od = od0; od < od1; ++od) {
    const int64_t id = od * g.stride[0] - g.padding[0] + a;
    for (int64_t oh = 0; oh < g.out_size[1]; ++oh) {
      const int64_t ih = oh * g.stride[1] - g.padding[1] + b;
      if (id < 0 || id >= D || ih < 0 || ih >= H) {  // the whole output row reads padding
        for (int64_t ow = 0; ow < g.out_size[2]; ++ow, ++p) col_row[p] = T(0);
        continue;
      }
      const T* xrow = xc + (id * H + ih) * W;
      for (int64_t ow = 0; ow < g.out_size[2]; ++ow, ++p) {
        const int64_t iw = ow * g.stride[2] - g.padding[2] + e;
        col_row[p] = (iw >= 0 && iw < W) ? xrow[iw] : T(0);
      }
    }
  }
}

// The output index o along one dimension that tap t reads input index i from:
// i = o * s - p + t. Returns -1 when no output voxel in [lo, hi) does.
GRIDNN_HD GRIDNN_INLINE int64_t tapped_output(int64_t i, int64_t t, int64_t s, int64_t p, int64_t lo, int64_t hi) {
  const int64_t num = i + p - t;
  if (num < 0 || num % s != 0) return -1;
  const int64_t o = num / s;
  return (o >= lo && o < hi) ? o : -1;
}

// col2vol for one input row (c, id, ih, all iw): adds to out[iw] every column entry (for
// output depth planes [od0, od1); `col` has (od1 - od0) * Ho * Wo columns) that vol2col
// filled from (c, id, ih, iw). Each voxel receives its terms in a fixed order (taps a, b, e
// ascending), one thread per row: deterministic, no atomics.
template <class T>
GRIDNN_HD GRIDNN_INLINE void col2vol_row(const T* col, const Conv3dGeometry& g, int64_t od0, int64_t od1, int64_t c,
                                         int64_t id, int64_t ih, T* out) {
  const int64_t ncols = (od1 - od0) * g.out_plane();
  const int64_t Ho = g.out_size[1], Wo = g.out_size[2], W = g.in_size[2];
  for (int64_t a = 0; a < g.kernel[0]; ++a) {
    const int64_t od = tapped_output(id, a, g.stride[0], g.padding[0], od0, od1);
    if (od < 0) continue;
    for (int64_t b = 0; b < g.kernel[1]; ++b) {
      const int64_t oh = tapped_output(ih, b, g.stride[1], g.padding[1], 0, Ho);
      if (oh < 0) continue;
      for (int64_t e = 0; e < g.kernel[2]; ++e) {
        const int64_t row = ((c * g.kernel[0] + a) * g.kernel[1] + b) * g.kernel[2] + e;
        const T* src = col + row * ncols + ((od - od0) * Ho + oh) * Wo;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t iw = ow * g.stride[2] - g.padding[2] + e;
          if (iw >= 0 && iw < W) out[iw] += src[ow];
        }
      }
    }
  }
}

// The input depths that output planes [od0, od1) read: [first, last] clamped to [0, D).
GRIDNN_HD GRIDNN_INLINE void input_depths_of(const Conv3dGeometry& g, int64_t od0, int64_t od1, int64_t* first,
                                             int64_t* last) {
  int64_t lo = od0 * g.stride[0] - g.padding[0];
  int64_t hi = (od1 - 1) * g.stride[0] - g.padding[0] + g.kernel[0] - 1;
  *first = lo < 0 ? 0 : lo;
  *last = hi >= g.in_size[0] ? g.in_size[0] - 1 : hi;
}

}  // namespace body
}  // namespace gridnn::kernels
