// Reduction bodies, written once for host and device (docs/design.md §3).
//
// A reduction views its input as [outer, len, inner] and produces outer × inner values,
// reducing the middle dimension. Every output is computed in the same fixed order on both
// backends, set by the shape alone:
//   1. The reduced dimension is cut into S = reduce_segments(len) segments of kReduceSegment
//      consecutive indices, the last one shorter (len <= kReduceSegment: one segment, the
//      whole dimension, also when len is 0).
//   2. A segment is reduced in L = reduce_lanes(len) lanes (a power of two, at most
//      kReduceLanes; the same L for every segment): lane l takes the segment's indices
//      begin + l, begin + l + L, ... in turn, starting from the identity; then the lanes are
//      combined by a pairwise tree (lanes [0, w) take lanes [w, 2w), w = L/2, ..., 1).
//   3. One segment: its tree's result is the output. Several: the output is the left fold,
//      from the identity, of the segments' results in order of the segment (reduce_fold).
// Segments are independent units of work: the CUDA backend runs one block per (output,
// segment) and a second kernel for the folds, so few outputs with long rows still fill the
// device; the CPU backend threads over them (kernels/cpu/reduce.cpp). No atomics: results
// are deterministic, independent of the thread and block counts, and bitwise the same on
// both backends (neither contracts into FMAs: -ffp-contract=off, -fmad=false).
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/hd.h"

namespace gridnn::kernels {

enum class ReduceOp { sum, sum_squares, max };

constexpr int kReduceLanes = 256;  // the most lanes (and CUDA threads) per segment

// Indices of the reduced dimension per segment: long enough that a segment's tree (255
// combines) costs little next to its 4096 additions (16 per lane), short enough that one
// output of 4 M elements is 1024 independent segments (CUDA blocks). A multiple of
// kReduceLanes, so every segment but the last holds whole blocks of lanes, and every lane
// of a segment of a long row has work.
constexpr int64_t kReduceSegment = 4096;
static_assert(kReduceSegment % kReduceLanes == 0, "segments hold whole blocks of lanes");

// Lanes used for a reduced dimension of length len: the smallest power of two >= len,
// capped at kReduceLanes, so short rows do not pay for 256 lanes and a 255-step tree. The
// same for every segment of the dimension (len > kReduceSegment gives kReduceLanes).
GRIDNN_HD GRIDNN_INLINE int reduce_lanes(int64_t len) {
  int lanes = 1;
  while (lanes < kReduceLanes && lanes < len) lanes *= 2;
  return lanes;
}

// Segments of a reduced dimension of length len: 1 up to kReduceSegment (0 included), then
// ceil(len / kReduceSegment).
GRIDNN_HD GRIDNN_INLINE int64_t reduce_segments(int64_t len) {
  return len <= kReduceSegment ? 1 : (len + kReduceSegment - 1) / kReduceSegment;
}

// The indices [begin, end) of segment k of a reduced dimension of length len.
struct ReduceSegment {
  int64_t begin, end;
};

GRIDNN_HD GRIDNN_INLINE ReduceSegment reduce_segment(int64_t len, int64_t k) {
  const int64_t begin = k * kReduceSegment;
  return {begin, len - begin < kReduceSegment ? len : begin + kReduceSegment};
}

namespace body {

struct Sum {
  GRIDNN_HD static float identity() { return 0.0f; }
  GRIDNN_HD static float map(float x) { return x; }
  GRIDNN_HD static float combine(float a, float b) { return a + b; }
};
struct SumSquares {
  GRIDNN_HD static float identity() { return 0.0f; }
  GRIDNN_HD static float map(float x) { return x * x; }
  GRIDNN_HD static float combine(float a, float b) { return a + b; }
};
struct Max {                                                             // NaN wins, as in torch.max
  GRIDNN_HD static float identity() { return bits_float(0xff800000u); }  // -inf
  GRIDNN_HD static float map(float x) { return x; }
  GRIDNN_HD static float combine(float a, float b) { return (a != a || a >= b) ? a : b; }
};

// Geometry of one reduction.
struct ReduceShape {
  int64_t outer, len, inner;
};

// Lane `lane` of `lanes` of segment `seg`: its partial result for output `o` (o =
// outer_index * inner + inner_index).
template <class Op, class T>
GRIDNN_HD GRIDNN_INLINE float reduce_lane(const T* x, ReduceShape s, int64_t o, ReduceSegment seg, int lane,
                                          int lanes) {
  const int64_t base = (o / s.inner) * s.len * s.inner + (o % s.inner);
  float acc = Op::identity();
  for (int64_t k = seg.begin + lane; k < seg.end; k += lanes)
    acc = Op::combine(acc, Op::map(to_float(x[base + k * s.inner])));
  return acc;
}

// One step of the pairwise tree: lanes [0, width) take lanes [width, 2 width).
template <class Op>
GRIDNN_HD GRIDNN_INLINE void reduce_tree_step(float* lanes, int lane, int width) {
  lanes[lane] = Op::combine(lanes[lane], lanes[lane + width]);
}

// Output o of n_out from its `segments` segments' results, stored segment-major (segment
// k's result for output o at partial[k * n_out + o]): the left fold from the identity.
template <class Op>
GRIDNN_HD GRIDNN_INLINE float reduce_fold(const float* partial, int64_t n_out, int64_t o, int64_t segments) {
  float acc = Op::identity();
  for (int64_t k = 0; k < segments; ++k) acc = Op::combine(acc, partial[k * n_out + o]);
  return acc;
}

}  // namespace body

template <class Fn>
void visit_reduce(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::sum:
      return fn(body::Sum{});
    case ReduceOp::sum_squares:
      return fn(body::SumSquares{});
    case ReduceOp::max:
      return fn(body::Max{});
  }
}

}  // namespace gridnn::kernels
