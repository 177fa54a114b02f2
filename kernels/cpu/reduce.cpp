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
T tree(std::array<float, kReduceLanes>& partial, int lanes) {
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) body::reduce_tree_step<Op>(partial.data(), lane, width);
  return from_float<T>(partial[0]);
}

template <class Op, class T>
void reduce_typed(const T* x, body::ReduceShape s, T* out) {
  const int64_t n_out = s.outer * s.inner;
  const int lanes = reduce_lanes(s.len);
  if (n_out >= omp_get_max_threads()) {
    parallel_for(n_out, [&](int64_t o) {
      std::array<float, kReduceLanes> partial;
      partial[0] = Op::identity();  // lanes >= 1 always; tells the compiler so
      for (int l = 0; l < lanes; ++l) partial[size_t(l)] = body::reduce_lane<Op>(x, s, o, l, lanes);
      out[o] = tree<Op, T>(partial, lanes);
    }, s.len + lanes);
    return;
  }
  for (int64_t o = 0; o < n_out; ++o) {
    std::array<float, kReduceLanes> partial;
    partial[0] = Op::identity();
    parallel_for(
        lanes, [&](int64_t l) { partial[size_t(l)] = body::reduce_lane<Op>(x, s, o, int(l), lanes); },
        s.len / lanes + 1);
    out[o] = tree<Op, T>(partial, lanes);
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
