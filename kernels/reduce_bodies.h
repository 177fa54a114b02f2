// Reduction bodies, written once for host and device (docs/design.md §3).
//
// A reduction views its input as [outer, len, inner] and produces outer × inner values,
// reducing the middle dimension. Every output is computed in the same fixed order on
// both backends: L = reduce_lanes(len) lanes (a power of two, at most kReduceLanes,
// depending on len alone) each fold a strided subset of the len elements (lane l takes
// elements l, l + L, ...), then the lanes are combined by a pairwise tree. The CUDA backend
// runs one thread per lane; the CPU backend keeps each lane's additions in that order while
// vectorizing across lanes (long rows) or across outputs (short rows, columns), see
// kernels/cpu/reduce.cpp. No atomics: results are deterministic, independent of the thread
// count, and meant to be bitwise the same on both backends (neither contracts into FMAs:
// -ffp-contract=off, -fmad=false).
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/hd.h"

namespace gridnn::kernels {

enum class ReduceOp { sum, sum_squares, max };

constexpr int kReduceLanes = 256;  // the most lanes (and CUDA threads) per output

// Lanes used for a reduced dimension of length len: the smallest power of two >= len,
// capped at kReduceLanes, so short rows do not pay for 256 lanes and a 255-step tree.
GRIDNN_HD GRIDNN_INLINE int reduce_lanes(int64_t len) {
  int lanes = 1;
  while (lanes < kReduceLanes && lanes < len) lanes *= 2;
  return lanes;
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
struct Max {  // NaN wins, as in torch.max
  GRIDNN_HD static float identity() { return bits_float(0xff800000u); }  // -inf
  GRIDNN_HD static float map(float x) { return x; }
  GRIDNN_HD static float combine(float a, float b) { return (a != a || a >= b) ? a : b; }
};

// Geometry of one reduction.
struct ReduceShape {
  int64_t outer, len, inner;
};

// Lane `lane` of `lanes`: its partial result for output `o` (o = outer_index * inner + inner_index).
template <class Op, class T>
GRIDNN_HD GRIDNN_INLINE float reduce_lane(const T* x, ReduceShape s, int64_t o, int lane, int lanes) {
  const int64_t base = (o / s.inner) * s.len * s.inner + (o % s.inner);
  float acc = Op::identity();
  for (int64_t k = lane; k < s.len; k += lanes) acc = Op::combine(acc, Op::map(to_float(x[base + k * s.inner])));
  return acc;
}

// One step of the pairwise tree: lanes [0, width) take lanes [width, 2 width).
template <class Op>
GRIDNN_HD GRIDNN_INLINE void reduce_tree_step(float* lanes, int lane, int width) {
  lanes[lane] = Op::combine(lanes[lane], lanes[lane + width]);
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
