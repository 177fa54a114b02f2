// CUDA backend of kernels/elementwise.h: grid-stride kernels over the element bodies of
// kernels/elementwise_bodies.h, the same functions the CPU backend loops over. Element i
// is computed by exactly the code the CPU runs for element i; only the loop differs.
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise.h"

namespace gridnn::kernels::cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* p, T value, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) p[i] = value;
}

template <class Dst, class Src>
__global__ void cast_kernel(const Src* in, Dst* out, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) out[i] = body::convert<Dst>(in[i]);
}

template <class T, class F>
__global__ void map1_kernel(const T* x, T* out, int64_t n, F f) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) body::map1_at(i, x, out, f);
}

template <class T, class F>
__global__ void map2_kernel(const T* a, const T* b, T* out, int64_t n, F f) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) body::map2_at(i, a, b, out, f);
}

// The inner dispatch of cast (over the destination type), for a known source type.
template <class Src>
void launch_cast(const Src* in, Tensor& dst, int64_t n, ::gridnn::cuda::DeviceContext& ctx) {
  GRIDNN_DISPATCH_ALL(dst.dtype(), "cast", [&] {
    cast_kernel<scalar_t, Src>
        <<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(in, static_cast<scalar_t*>(dst.raw()), n);
    GRIDNN_CHECK_LAUNCH("cast_kernel");
  });
}

}  // namespace

void fill(Tensor& t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(t);
  GRIDNN_DISPATCH_ALL(t.dtype(), "fill", [&] {
    const scalar_t v = body::convert<scalar_t>(value);  // converted once, on the host
    fill_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(static_cast<scalar_t*>(t.raw()), v, n);
    GRIDNN_CHECK_LAUNCH("fill_kernel");
  });
}

void cast(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(src);
  GRIDNN_DISPATCH_ALL(src.dtype(), "cast", [&] { launch_cast(static_cast<const scalar_t*>(src.raw()), dst, n, ctx); });
}

void unary(UnaryOp op, float param, const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(x);
  visit_unary(op, param, [&](auto f) {
    GRIDNN_DISPATCH_FLOATING(x.dtype(), "unary", [&] {
      map1_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
          static_cast<const scalar_t*>(x.raw()), static_cast<scalar_t*>(out.raw()), n, f);
      GRIDNN_CHECK_LAUNCH("map1_kernel");
    });
  });
}

void binary(BinaryOp op, float param, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel();
  if (n == 0) return;
  auto& ctx = detail::context_of(a);
  visit_binary(op, param, [&](auto f) {
    GRIDNN_DISPATCH_FLOATING(a.dtype(), "binary", [&] {
      map2_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
          static_cast<const scalar_t*>(a.raw()), static_cast<const scalar_t*>(b.raw()),
          static_cast<scalar_t*>(out.raw()), n, f);
      GRIDNN_CHECK_LAUNCH("map2_kernel");
    });
  });
}

}  // namespace gridnn::kernels::cuda
