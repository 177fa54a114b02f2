// Backward filter with one input channel, plane by plane: see kernels/cpu/conv3d_one_channel.h.
#include "kernels/cpu/conv3d_one_channel.h"

#include <omp.h>

#include <algorithm>
#include <exception>

#include "kernels/conv3d_one_channel_bodies.h"
#include "kernels/conv3d_workspace.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/gemm.h"

namespace gridnn::kernels::cpu::one_channel {
namespace {

constexpr int64_t kPlanesPerItem = 4;       // input depth planes per item of work
constexpr int64_t kRowFloats = 1 << 15;     // floats of columns unrolled at a time (128 KiB)
constexpr double kParallelFlops = 1 << 22;  // below this a pass stays on the calling thread

int64_t items_per_sample(const Conv3dGeometry& g) { return (g.in_size[0] + kPlanesPerItem - 1) / kPlanesPerItem; }
// Output rows per chunk: kRowFloats of columns, at least one row.
int64_t rows_per_chunk(const Conv3dGeometry& g) {
  const int64_t row = g.kernel[1] * g.kernel[2] * g.out_size[2];
  return std::clamp<int64_t>(kRowFloats / std::max<int64_t>(row, 1), 1, std::max<int64_t>(g.out_size[1], 1));
}
// Depth taps of one phase a % sd, at most.
int64_t taps_per_phase(const Conv3dGeometry& g) { return (g.kernel[0] + g.stride[0] - 1) / g.stride[0]; }
// The partials' floats: every phase's taps, kd rounded up to a multiple of sd.
int64_t partial_floats(const Conv3dGeometry& g) {
  return g.stride[0] * taps_per_phase(g) * g.out_channels * g.kernel[1] * g.kernel[2];
}
int64_t columns_floats(const Conv3dGeometry& g) {
  return rows_per_chunk(g) * g.kernel[1] * g.kernel[2] * g.out_size[2];
}
// A chunk's rows of dy, packed for the depth taps of one phase.
int64_t packed_floats(const Conv3dGeometry& g) {
  return taps_per_phase(g) * g.out_channels * rows_per_chunk(g) * g.out_size[2];
}
// The threads a pass of g on a batch of n runs on: one for a small pass (waking the pool
// costs more than it saves), else as many as there are items, up to the pool's size.
int64_t teams(const Conv3dGeometry& g, int64_t n) {
  const double flops = 2.0 * double(n) * double(g.out_channels * g.kernel_volume()) * double(g.out_volume());
  if (flops < kParallelFlops) return 1;
  return std::clamp<int64_t>(omp_get_max_threads(), 1, n * items_per_sample(g));
}

// The output columns [lo, hi) of a row whose tap c reads inside the input row: 0 <= iw < in
// with iw = ow stride + c - pad.
void reading_range(int64_t c, int64_t stride, int64_t pad, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  const int64_t first = pad - c;  // ow sw >= pad - c
  *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = in - 1 + pad - c;  // ow sw <= in - 1 + pad - c
  *hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  *lo = std::min(*lo, *hi);
}

// Output rows [oh0, oh1) of one input plane's column matrix, R = oh1 - oh0:
// cols [(b kw + c) R Wo + (oh - oh0) Wo + ow] = plane[oh sh + b - ph][ow sw + c - pw], 0 outside.
void unroll_rows(const float* plane, const Conv3dGeometry& g, int64_t oh0, int64_t oh1, float* cols) {
  const int64_t H = g.in_size[1], W = g.in_size[2], Wo = g.out_size[2];
  const int64_t sh = g.stride[1], sw = g.stride[2];
  for (int64_t b = 0; b < g.kernel[1]; ++b)
    for (int64_t c = 0; c < g.kernel[2]; ++c) {
      int64_t lo = 0, hi = 0;
      reading_range(c, sw, g.padding[2], W, Wo, &lo, &hi);
      float* row = cols + (b * g.kernel[2] + c) * (oh1 - oh0) * Wo;
      for (int64_t oh = oh0; oh < oh1; ++oh, row += Wo) {
        const int64_t ih = oh * sh + b - g.padding[1];
        if (ih < 0 || ih >= H || lo == hi) {
          std::fill_n(row, Wo, 0.0f);
          continue;
        }
        const float* in = plane + ih * W;
        std::fill_n(row, lo, 0.0f);
        for (int64_t ow = lo; ow < hi; ++ow) row[ow] = in[ow * sw + c - g.padding[2]];
        std::fill(row + hi, row + Wo, 0.0f);
      }
    }
}

// The partials' layout: row (a, o) of taps_hw values at row_of(a, o), the depth taps of one
// phase a % sd next to each other, so that the taps that read one input plane (one phase,
// consecutive a / sd) are consecutive blocks of O rows.
int64_t row_of(const Conv3dGeometry& g, int64_t a, int64_t o) {
  return ((a % g.stride[0]) * taps_per_phase(g) + a / g.stride[0]) * g.out_channels + o;
}

// partial += the gradient from sample n's input planes [id0, id1). Each plane is unrolled a few
// output rows at a time (kRowFloats of columns). The depth taps a that read it (od sd + a - pd
// = id, one phase of a) take one GEMM together: their output planes' rows of dy, packed one
// tap after another, times the columns, into their consecutive rows of the partial.
void add_planes(const float* xn, const float* dyn, const Conv3dGeometry& g, int64_t id0, int64_t id1, float* cols,
                float* packed, float* partial) {
  const int64_t sd = g.stride[0], pd = g.padding[0], O = g.out_channels, taps_hw = g.kernel[1] * g.kernel[2];
  const int64_t Wo = g.out_size[2], in_plane = g.in_size[1] * g.in_size[2], plane_out = g.out_plane();
  const int64_t rows = rows_per_chunk(g), out_volume = g.out_volume();
  for (int64_t id = id0; id < id1; ++id) {
    // The taps that read id: a = id + pd - od sd for 0 <= od < Do and 0 <= a < kd.
    const int64_t top = id + pd;  // a for od = 0
    if (top < 0) continue;
    const int64_t phase = top % sd, last = std::min(top, g.kernel[0] - 1);
    const int64_t a_hi = last - ((last - phase) % sd + sd) % sd;
    const int64_t a_lo = std::max(top - (g.out_size[0] - 1) * sd, phase);
    if (a_hi < a_lo) continue;
    const int64_t count = (a_hi - a_lo) / sd + 1;
    for (int64_t oh0 = 0; oh0 < g.out_size[1]; oh0 += rows) {
      const int64_t oh1 = std::min(oh0 + rows, g.out_size[1]), K = (oh1 - oh0) * Wo;
      unroll_rows(xn + id * in_plane, g, oh0, oh1, cols);
      for (int64_t t = 0; t < count; ++t) {  // dy rows of tap a_lo + t sd, output plane (top - a) / sd
        const int64_t od = (top - a_lo - t * sd) / sd;
        for (int64_t o = 0; o < O; ++o)
          std::copy_n(dyn + o * out_volume + od * plane_out + oh0 * Wo, K, packed + (t * O + o) * K);
      }
      sgemm(matrix_problem(count * O, taps_hw, K, false, K, true, K, taps_hw, 1.0f), packed, cols,
            partial + row_of(g, a_lo, 0) * taps_hw);
    }
  }
}

}  // namespace

bool takes(const Conv3dGeometry& g) { return g.in_channels == 1 && !g.is_pointwise() && g.out_plane() > 0; }

int64_t scratch_bytes(const Conv3dGeometry& g, int64_t n) {
  const int64_t items = n * items_per_sample(g);
  return host_floats_bytes(items * partial_floats(g)) +
         host_floats_bytes(teams(g, n) * (columns_floats(g) + packed_floats(g)));
}

void backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw) {
  const int64_t N = x.size(0), per_sample = items_per_sample(g), items = N * per_sample, K = partial_floats(g);
  if (items == 0 || g.out_volume() == 0) return;
  const int64_t threads = teams(g, N), scratch = columns_floats(g) + packed_floats(g);
  Tensor partials = Tensor::zeros({items, K}), buffers = Tensor::empty({threads, scratch});
  const float *xp = x.data<float>(), *dyp = dy.data<float>();
  float *pp = partials.data<float>(), *bp = buffers.data<float>();
  const int64_t in_sample = g.in_volume(), out_sample = g.out_channels * g.out_volume();
  std::exception_ptr failed;
#pragma omp parallel for schedule(static) num_threads(int(threads)) if (threads > 1)
  for (int64_t item = 0; item < items; ++item) {
    try {
      const int64_t n = item / per_sample, id0 = (item % per_sample) * kPlanesPerItem;
      const int64_t id1 = std::min(id0 + kPlanesPerItem, g.in_size[0]);
      float* mine = bp + omp_get_thread_num() * scratch;
      add_planes(xp + n * in_sample, dyp + n * out_sample, g, id0, id1, mine, mine + columns_floats(g), pp + item * K);
    } catch (...) {
#pragma omp critical(gridnn_one_channel_failure)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  // dw [O, kd, kh kw] += the partials' rows (a, o), summed in item order.
  const int64_t taps_hw = g.kernel[1] * g.kernel[2], kd = g.kernel[0];
  float* out = dw.data<float>();
  parallel_for(
      g.out_channels * kd,
      [&](int64_t r) {
        const int64_t o = r / kd, a = r % kd, from = row_of(g, a, o) * taps_hw;
        for (int64_t q = 0; q < taps_hw; ++q) {
          float sum = 0.0f;
          for (int64_t i = 0; i < items; ++i) sum += pp[i * K + from + q];
          out[r * taps_hw + q] += sum;
        }
      },
      items * taps_hw);
}

void backward_filter_by_tiles(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw) {
  const int64_t count = kernels::one_channel::tiles(g, x.size(0)),
                per_tile = kernels::one_channel::partials_per_tile(g);
  if (count == 0 || per_tile == 0) return;
  Tensor partials = Tensor::empty({count, per_tile});
  const float *xp = x.data<float>(), *dyp = dy.data<float>();
  float *pp = partials.data<float>(), *out = dw.data<float>();
  const int64_t Do = g.out_size[0];
  // Each partial on one thread, each dw element's sum on one thread: the split changes nothing.
  parallel_for(
      count * per_tile,
      [&](int64_t i) {
        const int64_t tile = i / per_tile;
        pp[i] = kernels::one_channel::body::partial(xp, dyp, g, tile / Do, tile % Do, i % per_tile);
      },
      g.out_plane());
  parallel_for(
      per_tile, [&](int64_t e) { out[e] += kernels::one_channel::body::total(pp, count, per_tile, e); }, count);
}

}  // namespace gridnn::kernels::cpu::one_channel
