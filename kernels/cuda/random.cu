// CUDA backend of kernels/random.h: a grid-stride loop calling body::random_value, the
// function the CPU backend calls, so element i gets the value keyed by (seed, stream,
// offset + i) on both backends (equal up to the last bits of logf/cosf and FMA).
#include "kernels/cuda/launch.cuh"
#include "kernels/random_bodies.h"

namespace gridnn::kernels::cuda {
namespace {

template <class T>
__global__ void random_kernel(T* p, int64_t n, Distribution d, float a, float b, uint64_t seed,
                              uint64_t stream, int64_t offset) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    p[i] = from_float<T>(body::random_value(d, a, b, seed, stream, uint64_t(offset + i)));
}

}  // namespace

void random(const RandomSpec& s, Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(t);
  GRIDNN_DISPATCH_FLOATING(t.dtype(), "random", [&] {
    random_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<scalar_t*>(t.raw()), n, s.distribution, s.a, s.b, s.key.seed, s.key.stream,
        s.key.offset);
    GRIDNN_CHECK_LAUNCH("random_kernel");
  });
}

}  // namespace gridnn::kernels::cuda
