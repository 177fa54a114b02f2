// CPU backend of kernels/reduce.h, in the order of kernels/reduce_bodies.h: for every output,
// each segment of the reduced dimension in L = reduce_lanes(len) lanes (lane l folds the
// segment's elements l, l + L, ... in turn), then the pairwise tree over the lanes, then
// (several segments) the fold of the segments' results. Two loops reduce segments; they keep
// that order and differ only in what they vectorize:
// - Long contiguous rows (inner == 1, L > kShortRowLanes): one segment of one output per
//   OpenMP iteration, its L lanes interleaved in one contiguous pass (element k goes to lane
//   k mod L), the loop over a block's lanes vectorized.
// - Short rows and columns (inner > 1): a tile of outputs at a time (the same segment of
//   each), every lane and tree step a loop over the tile's outputs (contiguous for columns),
//   vectorized across outputs; no per-output set-up. Sums over rows of exactly 2, 4, 8 or
//   16 elements (one per lane) keep their lanes and tree in registers instead.
// A dimension of one segment (len <= kReduceSegment) writes its outputs directly. Longer
// ones write each segment's result to a scratch buffer (segment-major), then fold it
// (body::reduce_fold). Threads share (output, segment) pairs, never the lanes of one
// segment: a whole-tensor reduction runs on as many threads as it has segments, each
// streaming its own contiguous part (splitting the lanes of one row among threads instead,
// a strided share of every block of L elements each, measured 2-3x slower on 2 threads than
// one thread streaming the whole row). Which loop runs, and how it is split over threads,
// never changes a result.
#include "kernels/reduce.h"

#include <omp.h>

#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {
namespace {

// Rows of at most this many lanes (len <= 16) take the tiled loop: their per-output set-up
// and tree would otherwise cost more than their few additions.
constexpr int kShortRowLanes = 16;
// Accumulators of one tile (lanes x outputs): 16 KiB of floats, kept in L1.
constexpr int64_t kTileFloats = 4096;

// The L lanes of one contiguous row, interleaved: block after block of L elements, element
// block + l into partial[l].
template <class Op, class T>
void fold_lanes(const T* x, int64_t len, int lanes, float* partial) {
  for (int l = 0; l < lanes; ++l) partial[l] = Op::identity();
  for (int64_t block = 0; block < len; block += lanes) {
    const int end = len - block < lanes ? int(len - block) : lanes;
    for (int l = 0; l < end; ++l) partial[l] = Op::combine(partial[l], Op::map(to_float(x[block + l])));
  }
}

template <class Op>
float tree(float* partial, int lanes) {
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) body::reduce_tree_step<Op>(partial, lane, width);
  return partial[0];
}

// Segment `seg` of a contiguous row (its first element at row[0]): the lanes, then the tree.
template <class Op, class T>
float reduce_row_segment(const T* row, ReduceSegment seg, int lanes) {
  float partial[kReduceLanes];
  fold_lanes<Op>(row + seg.begin, seg.end - seg.begin, lanes, partial);
  return tree<Op>(partial, lanes);
}

// Long contiguous rows of one segment: output o is row o.
template <class Op, class T>
void reduce_rows(const T* x, body::ReduceShape s, int lanes, T* out) {
  parallel_for(
      s.outer,
      [&](int64_t o) {
        out[o] = from_float<T>(reduce_row_segment<Op>(x + o * s.len, {0, s.len}, lanes));
      },
      s.len + lanes);
}

// Outputs [first, first + count) of one tile, output first + t reading its element k at
// x0[t * out_stride + k * len_stride]: rows (out_stride len, len_stride 1) or the columns of
// one outer index (out_stride 1, len_stride inner). acc[l * count + t] is lane l of output
// first + t; each lane and tree step is the loop over t. out: the outputs (T) or, for a
// segment of a longer dimension, the segment's results (float).
template <class Op, class T, class U>
void reduce_tile(const T* x0, int64_t out_stride, int64_t len_stride, int64_t len, int lanes, int64_t count, float* acc,
                 U* out) {
  for (int64_t j = 0; j < lanes * count; ++j) acc[j] = Op::identity();
  for (int64_t k = 0; k < len; ++k) {
    float* lane = acc + (k & (lanes - 1)) * count;  // lane k mod L (L a power of two)
    const T* xk = x0 + k * len_stride;
    for (int64_t t = 0; t < count; ++t) lane[t] = Op::combine(lane[t], Op::map(to_float(xk[t * out_stride])));
  }
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) {
      float* low = acc + l * count;
      const float* high = acc + (l + width) * count;
      for (int64_t t = 0; t < count; ++t) low[t] = Op::combine(low[t], high[t]);  // body::reduce_tree_step
    }
  for (int64_t t = 0; t < count; ++t) out[t] = from_float<U>(acc[t]);
}

// A tile of `count` rows of exactly L elements (L a power of two, 2..kShortRowLanes): one
// element per lane, so lane l of a row is identity combined with its element l; the lanes
// and the tree are unrolled into registers and the loop over rows vectorizes.
template <class Op, int L, class T>
void reduce_rows_of(const T* x, int64_t count, T* out) {
  for (int64_t t = 0; t < count; ++t) {
    float lane[L];
    for (int l = 0; l < L; ++l) lane[l] = Op::combine(Op::identity(), Op::map(to_float(x[t * L + l])));
    for (int width = L / 2; width > 0; width /= 2)
      for (int l = 0; l < width; ++l) body::reduce_tree_step<Op>(lane, l, width);
    out[t] = from_float<T>(lane[0]);
  }
}

// reduce_rows_of for rows of len == lanes elements; false for other rows, and for max:
// GCC 12 does not vectorize its NaN-aware select across the unrolled lanes, and the tiled
// loop is faster for it (2.4 against 3.3 ms for 1 Mi rows of 4).
template <class Op, class T>
bool reduce_exact_rows(const T* x, int64_t len, int lanes, int64_t count, T* out) {
  if (len != lanes || std::is_same_v<Op, body::Max>) return false;
  switch (lanes) {
    case 2:
      reduce_rows_of<Op, 2>(x, count, out);
      return true;
    case 4:
      reduce_rows_of<Op, 4>(x, count, out);
      return true;
    case 8:
      reduce_rows_of<Op, 8>(x, count, out);
      return true;
    case 16:
      reduce_rows_of<Op, 16>(x, count, out);
      return true;
    default:
      return false;
  }
}

// Outputs per tile of reduce_tiles and reduce_segmented: kTileFloats accumulators, at most
// `group` (the outputs that can share a tile) and at most as many as leave every thread a
// tile of one of the `segments` segments (1: one-segment dimensions).
int64_t tile_outputs(body::ReduceShape s, int lanes, int64_t group, int64_t segments) {
  const int64_t per_thread = s.outer * s.inner * segments / omp_get_max_threads();
  int64_t tile = kTileFloats / lanes;
  if (tile > per_thread) tile = per_thread > 0 ? per_thread : 1;
  return tile < group ? tile : group;
}

// Short rows (inner == 1) or columns (inner > 1) of one segment, tiles of outputs in
// parallel. Tiles never straddle two outer indices.
template <class Op, class T>
void reduce_tiles(const T* x, body::ReduceShape s, int lanes, T* out) {
  const bool rows = s.inner == 1;
  const int64_t group = rows ? s.outer : s.inner;  // outputs that can share a tile
  const int64_t tile = tile_outputs(s, lanes, group, 1);
  const int64_t tiles_per_group = (group + tile - 1) / tile;
  const int64_t groups = rows ? 1 : s.outer;
  parallel_for(
      groups * tiles_per_group,
      [&](int64_t item) {
        float acc[kTileFloats];
        const int64_t g = item / tiles_per_group, first = (item % tiles_per_group) * tile;
        const int64_t count = group - first < tile ? group - first : tile;
        const int64_t o = g * s.inner + first;  // the tile's first output
        if (!rows)
          reduce_tile<Op>(x + g * s.len * s.inner + first, 1, s.inner, s.len, lanes, count, acc, out + o);
        else if (!reduce_exact_rows<Op>(x + o * s.len, s.len, lanes, count, out + o))
          reduce_tile<Op>(x + o * s.len, s.len, 1, s.len, lanes, count, acc, out + o);
      },
      tile * s.len);
}

// A reduced dimension of several segments (len > kReduceSegment, so L = kReduceLanes):
// pass 1 reduces every (output, segment) pair into partial[k * n_out + o] (rows: one pair
// per iteration; columns: a tile of outputs of one outer index per iteration), pass 2 folds
// each output's segments in order (body::reduce_fold).
template <class Op, class T>
void reduce_segmented(const T* x, body::ReduceShape s, int lanes, int64_t segments, T* out) {
  const int64_t n_out = s.outer * s.inner;
  std::vector<float> partial(size_t(n_out * segments));
  float* const part = partial.data();
  if (s.inner == 1) {
    parallel_for(
        n_out * segments,
        [&](int64_t item) {
          const int64_t o = item / segments, k = item % segments;
          part[k * n_out + o] = reduce_row_segment<Op>(x + o * s.len, reduce_segment(s.len, k), lanes);
        },
        kReduceSegment);
  } else {
    const int64_t tile = tile_outputs(s, lanes, s.inner, segments);
    const int64_t tiles_per_group = (s.inner + tile - 1) / tile;
    const int64_t per_segment = s.outer * tiles_per_group;
    parallel_for(
        segments * per_segment,
        [&](int64_t item) {
          float acc[kTileFloats];
          const int64_t k = item / per_segment, rest = item % per_segment;
          const int64_t g = rest / tiles_per_group, first = (rest % tiles_per_group) * tile;
          const int64_t count = s.inner - first < tile ? s.inner - first : tile;
          const ReduceSegment seg = reduce_segment(s.len, k);
          reduce_tile<Op>(x + (g * s.len + seg.begin) * s.inner + first, 1, s.inner, seg.end - seg.begin, lanes, count,
                          acc, part + k * n_out + g * s.inner + first);
        },
        tile * kReduceSegment);
  }
  parallel_for(
      n_out, [&](int64_t o) { out[o] = from_float<T>(body::reduce_fold<Op>(part, n_out, o, segments)); }, segments);
}

template <class Op, class T>
void reduce_typed(const T* x, body::ReduceShape s, T* out) {
  if (s.outer * s.inner == 0) return;
  const int lanes = reduce_lanes(s.len);
  const int64_t segments = reduce_segments(s.len);
  if (segments > 1)
    reduce_segmented<Op>(x, s, lanes, segments, out);
  else if (s.inner == 1 && lanes > kShortRowLanes)
    reduce_rows<Op>(x, s, lanes, out);
  else
    reduce_tiles<Op>(x, s, lanes, out);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, body::ReduceShape shape, Tensor& out) {
  visit_reduce(op, [&](auto o) {
    using Op = decltype(o);
    GRIDNN_DISPATCH_FLOATING(x.dtype(), "reduce", [&] {
      reduce_typed<Op>(static_cast<const scalar_t*>(x.raw()), shape, static_cast<scalar_t*>(out.raw()));
    });
  });
}

}  // namespace gridnn::kernels::cpu
