// CUDA backend of kernels/random.h: a grid-stride loop calling body::random_at, the
// function the CPU backend calls, so every element gets the value keyed by its global
// index on both backends (equal up to the last bits of logf/cosf and FMA).
#include "kernels/cuda/launch.cuh"
#include "kernels/random_bodies.h"

namespace gridnn::kernels::cuda {
namespace {

template <class T>
__global__ void random_kernel(T* p, int64_t n, RandomSpec s) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) p[i] = from_float<T>(body::random_at(s, i));
}

}  // namespace

void random(const RandomSpec& s, Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(t);
  GRIDNN_DISPATCH_FLOATING(t.dtype(), "random", [&] {
    random_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(static_cast<scalar_t*>(t.raw()), n, s);
    GRIDNN_CHECK_LAUNCH("random_kernel");
  });
}

}  // namespace gridnn::kernels::cuda
