// Backward filter with one input channel on the GPU: the two passes of
// kernels/conv3d_one_channel_bodies.h, in their order (docs/design.md §3).
//
// Pass 1, one block per tile (sample n, output depth plane od). Each thread owns, in
// registers, the partials of kChannels output channels x a run of consecutive taps of one
// kernel row (a, b, c0 .. c0 + SEGMENT - 1; a row of kw taps is one run up to kMaxSegment
// taps): thread t takes channel group t % groups and run t / groups, so the lanes that read
// the same staged input share it by broadcast. The plane's output rows are taken a chunk of
// `rows` at a time: the block stages the chunk's dy (per output position a float4 of each
// channel group, zeros past O) and the input rows its taps read (kd planes x ((rows - 1) sh
// + kh) rows x ((Wo - 1) sw + kw) columns and up to a run's end, zeros in the padding, from
// the body's input_or_zero) in shared memory, then every thread runs through the chunk's
// positions in row-major order, one fmaf per partial per position. Each partial is thus the
// body's sum, in its order: the same bits. Per position a thread loads one float4 of dy and
// SEGMENT consecutive inputs (one address, immediate offsets) for 4 x SEGMENT fmaf.
// Pass 2, one thread per filter element: the partials added in tile order, then into dw.
// Compiled with -fmad=false (kernels/CMakeLists.txt): every fused multiply-add is an
// explicit fmaf.
#include <algorithm>

#include "kernels/conv3d.h"
#include "kernels/conv3d_one_channel_bodies.h"
#include "kernels/cuda/conv3d_one_channel.h"
#include "kernels/cuda/launch.cuh"

namespace gridnn::kernels::cuda::one_channel {
namespace {

namespace shared_body = ::gridnn::kernels::one_channel;

constexpr int kChannels = 4;               // output channels per thread: one float4 of dy
constexpr int kMaxSegment = 8;             // filter taps per thread, at most: a run of one kernel row
constexpr int kMaxThreads = 512;           // channel groups x kd x kh x segments, rounded up to warps
constexpr int64_t kMaxRows = 16;           // output rows per chunk, at most
constexpr size_t kSmallShared = 48 << 10;  // shared memory a block gets without opting in

// How a geometry's tiles run. A kernel row of kw taps is cut into `segments` runs of
// `segment` consecutive taps (the last may reach past kw: those lanes' sums are dropped).
struct Layout {
  int groups = 0;       // channel groups: ceil(O / kChannels)
  int segment = 0;      // taps per thread: ceil(kw / segments)
  int segments = 0;     // ceil(kw / kMaxSegment)
  int threads = 0;      // groups x kd x kh x segments, rounded up to a warp
  int rows = 0;         // output rows per chunk (0: the kernel does not take the geometry)
  int staged_rows = 0;  // input rows per plane per chunk: (rows - 1) sh + kh
  int width = 0;        // staged columns: (Wo - 1) sw + segments x segment (>= kw)
  size_t shared = 0;    // bytes of shared memory per block
};

size_t shared_bytes(const Conv3dGeometry& g, int64_t groups, int64_t rows, int64_t width) {
  const int64_t staged_rows = (rows - 1) * g.stride[1] + g.kernel[1];
  return size_t(rows * g.out_size[2] * groups * kChannels + g.kernel[0] * staged_rows * width) * sizeof(float);
}

// The layout of g on a device with `shared_limit` bytes of shared memory per block (opted
// in): as many output rows per chunk as fit in kSmallShared, or one row in the limit.
Layout layout_for(const Conv3dGeometry& g, size_t shared_limit) {
  Layout l;
  if (!shared_body::takes(g)) return l;
  const int64_t groups = (g.out_channels + kChannels - 1) / kChannels;
  const int64_t segments = (g.kernel[2] + kMaxSegment - 1) / kMaxSegment;
  const int64_t segment = (g.kernel[2] + segments - 1) / segments;
  const int64_t work = groups * g.kernel[0] * g.kernel[1] * segments;
  if (work > kMaxThreads) return l;
  const int64_t width = (g.out_size[2] - 1) * g.stride[2] + segments * segment;
  l.groups = int(groups);
  l.segment = int(segment);
  l.segments = int(segments);
  l.threads = int((work + 31) / 32 * 32);
  l.width = int(width);
  const size_t budget = shared_bytes(g, groups, 1, width) > kSmallShared ? shared_limit : kSmallShared;
  for (int64_t r = 1; r <= std::min(g.out_size[1], kMaxRows); ++r) {
    const size_t bytes = shared_bytes(g, groups, r, width);
    if (bytes > budget) break;
    l.rows = int(r);
    l.shared = bytes;
  }
  l.staged_rows = int((l.rows - 1) * g.stride[1] + g.kernel[1]);
  return l;
}

Layout layout_on(const Conv3dGeometry& g, int device) {
  const auto& props = ::gridnn::cuda::context(device).properties;
  return layout_for(g, size_t(props.sharedMemPerBlockOptin));
}

// Pass 1 for the tiles of blocks 0, 1, ...; SEGMENT = l.segment taps per thread.
template <int SEGMENT>
__global__ void __maxnreg__(72) partials_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                                Conv3dGeometry g, Layout l, float* __restrict__ partials) {
  extern __shared__ float4 staged[];
  const int64_t Do = g.out_size[0], Ho = g.out_size[1], Wo = g.out_size[2], O = g.out_channels;
  float4* dys = staged;                                                            // [rows Wo][groups]
  float* xs = reinterpret_cast<float*>(staged + int64_t(l.rows) * Wo * l.groups);  // [kd][staged_rows][width]
  const int64_t tile = blockIdx.x, n = tile / Do, od = tile % Do;
  const int kd = int(g.kernel[0]), kh = int(g.kernel[1]), kw = int(g.kernel[2]);
  const int t = int(threadIdx.x), group = t % l.groups, run = t / l.groups;  // run: (a, b, segment)
  const bool working = run < kd * kh * l.segments;
  const int c0 = (run % l.segments) * SEGMENT, b = (run / l.segments) % kh, a = run / (l.segments * kh);
  const int sh = int(g.stride[1]), sw = int(g.stride[2]), width = l.width;
  // The thread's first staged input: plane a, row b, column c0; its taps read the next
  // SEGMENT columns.
  const int first = working ? (a * l.staged_rows + b) * width + c0 : 0;
  float acc[kChannels][SEGMENT];
#pragma unroll
  for (int k = 0; k < kChannels; ++k)
#pragma unroll
    for (int j = 0; j < SEGMENT; ++j) acc[k][j] = 0.0f;

  const float* xn = x + n * g.in_volume();
  const int64_t out_volume = g.out_volume();
  const float* dyn = dy + n * O * out_volume + od * Ho * Wo;
  const int64_t id0 = od * g.stride[0] - g.padding[0];
  for (int64_t oh0 = 0; oh0 < Ho; oh0 += l.rows) {
    const int rows = int(std::min<int64_t>(l.rows, Ho - oh0));
    __syncthreads();  // every thread is done with the previous chunk
    // dy: a float4 of channels 4 k0 .. 4 k0 + 3 per position (zeros past O).
    const int positions = rows * int(Wo), step = int(blockDim.x);
    for (int i = t; i < positions * l.groups; i += step) {
      const int p = i % positions, k0 = (i / positions) * kChannels;
      const float* from = dyn + oh0 * Wo + p;
      float v[kChannels];
#pragma unroll
      for (int k = 0; k < kChannels; ++k) v[k] = k0 + k < O ? from[(k0 + k) * out_volume] : 0.0f;
      dys[p * l.groups + k0 / kChannels] = make_float4(v[0], v[1], v[2], v[3]);
    }
    // The input rows, one warp per row, its lanes along the row (coalesced).
    const int staged_rows = (rows - 1) * sh + kh, warps = step / 32;
    const int64_t ih0 = oh0 * sh - g.padding[1];
    for (int row = t / 32; row < kd * staged_rows; row += warps) {
      const int pa = row / staged_rows, r = row % staged_rows;
      float* to = xs + (pa * l.staged_rows + r) * width;
      for (int col = t % 32; col < width; col += 32)
        to[col] = shared_body::body::input_or_zero(xn, g, id0 + pa, ih0 + r, col - g.padding[2]);
    }
    __syncthreads();
    if (!working) continue;
    for (int r = 0; r < rows; ++r) {
      const float* xr = xs + first + r * sh * width;
      const float4* dr = dys + r * int(Wo) * l.groups + group;
      for (int ow = 0; ow < int(Wo); ++ow) {
        const float4 d = dr[ow * l.groups];
        const float* xp = xr + ow * sw;
        float v[SEGMENT];
#pragma unroll
        for (int j = 0; j < SEGMENT; ++j) v[j] = xp[j];
#pragma unroll
        for (int j = 0; j < SEGMENT; ++j) {
          acc[0][j] = fmaf(d.x, v[j], acc[0][j]);
          acc[1][j] = fmaf(d.y, v[j], acc[1][j]);
          acc[2][j] = fmaf(d.z, v[j], acc[2][j]);
          acc[3][j] = fmaf(d.w, v[j], acc[3][j]);
        }
      }
    }
  }
  if (!working) return;
  const int kvol = kd * kh * kw;
  float* out = partials + tile * O * kvol + (a * kh + b) * kw + c0;
#pragma unroll
  for (int k = 0; k < kChannels; ++k) {
    const int64_t o = int64_t(group) * kChannels + k;
    if (o >= O) break;
#pragma unroll
    for (int j = 0; j < SEGMENT; ++j)
      if (c0 + j < kw) out[o * kvol + j] = acc[k][j];
  }
}

// Launches pass 1 with SEGMENT = l.segment (1 .. kMaxSegment).
void launch_partials(const Layout& l, unsigned tiles, cudaStream_t stream, const float* x, const float* dy,
                     const Conv3dGeometry& g, float* partials) {
  auto launch = [&](auto kernel) {
    if (l.shared > kSmallShared)
      GRIDNN_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.shared)));
    kernel<<<tiles, unsigned(l.threads), l.shared, stream>>>(x, dy, g, l, partials);
    GRIDNN_CHECK_LAUNCH("conv3d one-channel partials_kernel");
  };
  switch (l.segment) {
    case 1:
      return launch(partials_kernel<1>);
    case 2:
      return launch(partials_kernel<2>);
    case 3:
      return launch(partials_kernel<3>);
    case 4:
      return launch(partials_kernel<4>);
    case 5:
      return launch(partials_kernel<5>);
    case 6:
      return launch(partials_kernel<6>);
    case 7:
      return launch(partials_kernel<7>);
    default:
      return launch(partials_kernel<kMaxSegment>);
  }
}

__global__ void total_kernel(const float* __restrict__ partials, int64_t count, int64_t per_tile,
                             float* __restrict__ dw) {
  for (int64_t e = detail::grid_first(); e < per_tile; e += detail::grid_stride())
    dw[e] += shared_body::body::total(partials, count, per_tile, e);
}

}  // namespace

bool fits(const Conv3dGeometry& g, int device) { return layout_on(g, device).rows > 0; }

size_t workspace_bytes(const Conv3dGeometry& g, int64_t n) {
  return size_t(shared_body::tiles(g, n) * shared_body::partials_per_tile(g)) * sizeof(float);
}

void backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw, void* workspace) {
  const Layout l = layout_on(g, x.device().index);
  GRIDNN_REQUIRE(l.rows > 0, "conv3d backward filter (one channel): the CUDA kernel does not take ", ops::str(g));
  auto& ctx = detail::context_of(dw);
  const int64_t count = shared_body::tiles(g, x.size(0)), per_tile = shared_body::partials_per_tile(g);
  if (count == 0) return;
  float* partials = static_cast<float*>(workspace);
  launch_partials(l, unsigned(count), ctx.stream, x.data<float>(), dy.data<float>(), g, partials);
  total_kernel<<<detail::grid_for(ctx, per_tile), detail::kThreads, 0, ctx.stream>>>(partials, count, per_tile,
                                                                                     dw.data<float>());
  GRIDNN_CHECK_LAUNCH("conv3d one-channel total_kernel");
}

}  // namespace gridnn::kernels::cuda::one_channel
