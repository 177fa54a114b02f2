// CPU backend of kernels/reduce.h, in the order of kernels/reduce_bodies.h: for every output,
// lane l of L = reduce_lanes(len) folds elements l, l + L, ... in turn, then the pairwise tree
// over the lanes. Two loops keep that order and differ only in what they vectorize:
// - Long contiguous rows (inner == 1, L > kShortRowLanes): one output per OpenMP iteration,
//   its L lanes interleaved in one contiguous pass (element k goes to lane k mod L), the loop
//   over a block's lanes vectorized.
// - Short rows and columns (inner > 1): a tile of outputs at a time, every lane and tree
//   step a loop over the tile's outputs (contiguous for columns), vectorized across outputs;
//   no per-output set-up. Sums over rows of exactly 2, 4, 8 or 16 elements (one per lane)
//   keep their lanes and tree in registers instead.
// Threads share outputs, never the lanes of one output: a whole-tensor reduction runs on one
// thread. Splitting its lanes among threads gives each a strided share of every block of L
// elements, and measured 2-3x slower on 2 threads than one thread streaming the whole input.
// Which loop runs, and how it is split over threads, never changes a result.
#include "kernels/reduce.h"

#include <omp.h>

#include <type_traits>

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
    for (int l = 0; l < end; ++l)
      partial[l] = Op::combine(partial[l], Op::map(to_float(x[block + l])));
  }
}

template <class Op>
float tree(float* partial, int lanes) {
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) body::reduce_tree_step<Op>(partial, lane, width);
  return partial[0];
}

// Long contiguous rows: output o is row o.
template <class Op, class T>
void reduce_rows(const T* x, body::ReduceShape s, int lanes, T* out) {
  const int64_t n_out = s.outer;
  parallel_for(
      n_out,
      [&](int64_t o) {
        float partial[kReduceLanes];
        fold_lanes<Op>(x + o * s.len, s.len, lanes, partial);
        out[o] = from_float<T>(tree<Op>(partial, lanes));
      },
      s.len + lanes);
}

// Outputs [first, first + count) of one tile, output first + t reading its element k at
// x0[t * out_stride + k * len_stride]: rows (out_stride len, len_stride 1) or the columns of
// one outer index (out_stride 1, len_stride inner). acc[l * count + t] is lane l of output
// first + t; each lane and tree step is the loop over t.
template <class Op, class T>
void reduce_tile(const T* x0, int64_t out_stride, int64_t len_stride, int64_t len, int lanes,
                 int64_t count, float* acc, T* out) {
  for (int64_t j = 0; j < lanes * count; ++j) acc[j] = Op::identity();
  for (int64_t k = 0; k < len; ++k) {
    float* lane = acc + (k & (lanes - 1)) * count;  // lane k mod L (L a power of two)
    const T* xk = x0 + k * len_stride;
    for (int64_t t = 0; t < count; ++t)
      lane[t] = Op::combine(lane[t], Op::map(to_float(xk[t * out_stride])));
  }
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) {
      float* low = acc + l * count;
      const float* high = acc + (l + width) * count;
      for (int64_t t = 0; t < count; ++t)
        low[t] = Op::combine(low[t], high[t]);  // body::reduce_tree_step
    }
  for (int64_t t = 0; t < count; ++t) out[t] = from_float<T>(acc[t]);
}

// A tile of `count` rows of exactly L elements (L a power of two, 2..kShortRowLanes): one
// element per lane, so lane l of a row is identity combined with its element l; the lanes
// and the tree are unrolled into registers and the loop over rows vectorizes.
template <class Op, int L, class T>
void reduce_rows_of(const T* x, int64_t count, T* out) {
  for (int64_t t = 0; t < count; ++t) {
    float lane[L];
    for (int l = 0; l < L; ++l)
      lane[l] = Op::combine(Op::identity(), Op::map(to_float(x[t * L + l])));
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

// Short rows (inner == 1) or columns (inner > 1), tiles of outputs in parallel. Tiles never
// straddle two outer indices; at most as many outputs as leave every thread a tile.
template <class Op, class T>
void reduce_tiles(const T* x, body::ReduceShape s, int lanes, T* out) {
  const bool rows = s.inner == 1;
  const int64_t group = rows ? s.outer : s.inner;  // outputs that can share a tile
  const int64_t per_thread = s.outer * s.inner / omp_get_max_threads();
  int64_t tile = kTileFloats / lanes;
  if (tile > per_thread) tile = per_thread > 0 ? per_thread : 1;
  if (tile > group) tile = group;
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
          reduce_tile<Op>(x + g * s.len * s.inner + first, 1, s.inner, s.len, lanes, count, acc,
                          out + o);
        else if (!reduce_exact_rows<Op>(x + o * s.len, s.len, lanes, count, out + o))
          reduce_tile<Op>(x + o * s.len, s.len, 1, s.len, lanes, count, acc, out + o);
      },
      tile * s.len);
}

template <class Op, class T>
void reduce_typed(const T* x, body::ReduceShape s, T* out) {
  if (s.outer * s.inner == 0) return;
  const int lanes = reduce_lanes(s.len);
  if (s.inner == 1 && lanes > kShortRowLanes)
    reduce_rows<Op>(x, s, lanes, out);
  else
    reduce_tiles<Op>(x, s, lanes, out);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, body::ReduceShape shape, Tensor& out) {
  visit_reduce(op, [&](auto o) {
    using Op = decltype(o);
    GRIDNN_DISPATCH_FLOATING(x.dtype(), "reduce", [&] {
      reduce_typed<Op>(static_cast<const scalar_t*>(x.raw()), shape,
                       static_cast<scalar_t*>(out.raw()));
    });
  });
}

}  // namespace gridnn::kernels::cpu
