// CUDA backend of kernels/pool3d.h: grid-stride kernels over the bodies of
// kernels/pool3d_bodies.h, the functions the CPU backend loops over (one thread per output
// element forward, per input element backward: gathers, no atomics).
#include "kernels/cuda/launch.cuh"
#include "kernels/pool3d.h"

namespace gridnn::kernels::cuda {
namespace {

template <class T>
__global__ void max_pool_kernel(const T* x, Pool3dGeometry g, T* y, int64_t* argmax, int64_t n) {
  for (int64_t o = detail::grid_first(); o < n; o += detail::grid_stride()) body::max_pool_at(o, x, g, y, argmax);
}

template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int64_t* argmax, Pool3dGeometry g, T* dx, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::max_pool_backward_at(i, dy, argmax, g, dx);
}

template <class T>
__global__ void avg_pool_kernel(const T* x, Pool3dGeometry g, T* y, int64_t n) {
  for (int64_t o = detail::grid_first(); o < n; o += detail::grid_stride()) body::avg_pool_at(o, x, g, y);
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* dy, Pool3dGeometry g, T* dx, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) body::avg_pool_backward_at(i, dy, g, dx);
}

template <class T>
__global__ void global_avg_pool_backward_kernel(const T* dy, int64_t volume, T* dx, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::global_avg_pool_backward_at(i, dy, volume, dx);
}

}  // namespace

void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax) {
  const int64_t n = y.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "max_pool3d_forward", [&] {
    max_pool_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(x.raw()), g, static_cast<scalar_t*>(y.raw()), static_cast<int64_t*>(argmax.raw()),
        n);
    GRIDNN_CHECK_LAUNCH("max_pool_kernel");
  });
}

void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dGeometry& g, Tensor& dx) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(dy);
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "max_pool3d_backward", [&] {
    max_pool_backward_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(dy.raw()), static_cast<const int64_t*>(argmax.raw()), g,
        static_cast<scalar_t*>(dx.raw()), n);
    GRIDNN_CHECK_LAUNCH("max_pool_backward_kernel");
  });
}

void avg_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(x);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "avg_pool3d_forward", [&] {
    avg_pool_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(x.raw()), g, static_cast<scalar_t*>(y.raw()), n);
    GRIDNN_CHECK_LAUNCH("avg_pool_kernel");
  });
}

void avg_pool3d_backward(const Tensor& dy, const Pool3dGeometry& g, Tensor& dx) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(dy);
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "avg_pool3d_backward", [&] {
    avg_pool_backward_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(dy.raw()), g, static_cast<scalar_t*>(dx.raw()), n);
    GRIDNN_CHECK_LAUNCH("avg_pool_backward_kernel");
  });
}

void global_avg_pool3d_backward(const Tensor& dy, int64_t volume, Tensor& dx) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(dy);
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "global_avg_pool3d_backward", [&] {
    global_avg_pool_backward_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const scalar_t*>(dy.raw()), volume, static_cast<scalar_t*>(dx.raw()), n);
    GRIDNN_CHECK_LAUNCH("global_avg_pool_backward_kernel");
  });
}

}  // namespace gridnn::kernels::cuda
