// CPU backend of kernels/layout.h: rows of the box (its last dimension) split over the
// OpenMP threads, each row's offsets from the shared body.
#include "kernels/layout.h"

#include "kernels/cpu/parallel_for.h"
#include "kernels/elementwise_bodies.h"

namespace gridnn::kernels::cpu {

namespace {
// f(src_offset, dst_offset, src_step, dst_step, n) for each row of the box.
template <class F>
void for_each_row(const StridedBox& box, F&& f) {
  const int64_t inner = box.rank ? box.size[box.rank - 1] : 1;
  const int64_t src_step = box.rank ? box.src_stride[box.rank - 1] : 0;
  const int64_t dst_step = box.rank ? box.dst_stride[box.rank - 1] : 0;
  parallel_for(
      box.numel() / inner,
      [&](int64_t row) {
        int64_t s = 0, d = 0;
        body::box_offsets(box, row * inner, &s, &d);
        f(s, d, src_step, dst_step, inner);
      },
      inner);
}
}  // namespace

void strided_move(const Tensor& src, Tensor& dst, const StridedBox& box, LayoutMode mode) {
  auto run = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    const T* in = static_cast<const T*>(src.raw());
    T* out = static_cast<T*>(dst.raw());
    for_each_row(box, [&](int64_t s, int64_t d, int64_t ss, int64_t ds, int64_t n) {
      for (int64_t j = 0; j < n; ++j) body::move_element(in + s + j * ss, out + d + j * ds, mode);
    });
  };
  if (mode == LayoutMode::add)
    GRIDNN_DISPATCH_FLOATING(dst.dtype(), "add_slices", [&] { run(static_cast<scalar_t*>(nullptr)); });
  else
    GRIDNN_DISPATCH_ALL(dst.dtype(), "copy_slices", [&] { run(static_cast<scalar_t*>(nullptr)); });
}

void strided_fill(Tensor& dst, const StridedBox& box, double value) {
  GRIDNN_DISPATCH_ALL(dst.dtype(), "fill_slices", [&] {
    const scalar_t v = body::convert<scalar_t>(value);
    scalar_t* out = static_cast<scalar_t*>(dst.raw());
    for_each_row(box, [&](int64_t, int64_t d, int64_t, int64_t ds, int64_t n) {
      for (int64_t j = 0; j < n; ++j) out[d + j * ds] = v;
    });
  });
}

}  // namespace gridnn::kernels::cpu
