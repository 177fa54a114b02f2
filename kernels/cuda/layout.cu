// CUDA backend of kernels/layout.h: one thread per element of the box (grid-stride), its
// offsets from the body the CPU backend uses (kernels/layout_bodies.h).
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_bodies.h"
#include "kernels/layout.h"

namespace gridnn::kernels::cuda {
namespace {

template <class T>
__global__ void strided_move_kernel(const T* src, T* dst, StridedBox box, int64_t n, LayoutMode mode) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) {
    int64_t s = 0, d = 0;
    body::box_offsets(box, i, &s, &d);
    body::move_element(src + s, dst + d, mode);
  }
}

template <class T>
__global__ void strided_fill_kernel(T* dst, StridedBox box, int64_t n, T value) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) {
    int64_t s = 0, d = 0;
    body::box_offsets(box, i, &s, &d);
    dst[d] = value;
  }
}

}  // namespace

void strided_move(const Tensor& src, Tensor& dst, const StridedBox& box, LayoutMode mode) {
  const int64_t n = box.numel();
  auto& ctx = detail::context_of(dst);
  auto launch = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    strided_move_kernel<T><<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<const T*>(src.raw()), static_cast<T*>(dst.raw()), box, n, mode);
    GRIDNN_CHECK_LAUNCH("strided_move_kernel");
  };
  if (mode == LayoutMode::add)
    GRIDNN_DISPATCH_FLOATING(dst.dtype(), "add_slices", [&] { launch(static_cast<scalar_t*>(nullptr)); });
  else
    GRIDNN_DISPATCH_ALL(dst.dtype(), "copy_slices", [&] { launch(static_cast<scalar_t*>(nullptr)); });
}

void strided_fill(Tensor& dst, const StridedBox& box, double value) {
  const int64_t n = box.numel();
  auto& ctx = detail::context_of(dst);
  GRIDNN_DISPATCH_ALL(dst.dtype(), "fill_slices", [&] {
    strided_fill_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        static_cast<scalar_t*>(dst.raw()), box, n, body::convert<scalar_t>(value));
    GRIDNN_CHECK_LAUNCH("strided_fill_kernel");
  });
}

}  // namespace gridnn::kernels::cuda
