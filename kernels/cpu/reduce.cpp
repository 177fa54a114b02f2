// CPU backend of kernels/reduce.h: the lanes of kernels/reduce_bodies.h run in a loop.
// Many outputs: one output per OpenMP iteration. Few outputs (a full reduction): the
// lanes of each output run in parallel, then the tree runs serially; the result is the
// same either way.
#include <omp.h>

#include <array>

#include "kernels/cpu/parallel_for.h"
#include "kernels/reduce.h"

namespace gridnn::kernels::cpu {
namespace {

template <class Op, class T>
T tree(std::array<float, kReduceLanes>& lanes) {
  for (int width = kReduceLanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) body::reduce_tree_step<Op>(lanes.data(), lane, width);
  return from_float<T>(lanes[0]);
}

template <class Op, class T>
void reduce_typed(const T* x, body::ReduceShape s, T* out) {
  const int64_t n_out = s.outer * s.inner;
  if (n_out >= omp_get_max_threads()) {
    parallel_for(n_out, [&](int64_t o) {
      std::array<float, kReduceLanes> lanes;
      for (int l = 0; l < kReduceLanes; ++l) lanes[l] = body::reduce_lane<Op>(x, s, o, l);
      out[o] = tree<Op, T>(lanes);
    }, s.len + kReduceLanes);
    return;
  }
  for (int64_t o = 0; o < n_out; ++o) {
    std::array<float, kReduceLanes> lanes;
    parallel_for(
        kReduceLanes, [&](int64_t l) { lanes[size_t(l)] = body::reduce_lane<Op>(x, s, o, int(l)); },
        s.len / kReduceLanes + 1);
    out[o] = tree<Op, T>(lanes);
  }
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
