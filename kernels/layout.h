// Moving elements between layouts: permuting dimensions, and copying, adding or filling a
// slab of slices along one dimension. For host and device tensors alike (no hidden host
// copies): the halo exchange packs and unpacks its planes with them, the depth hand-over and
// the attention's key/value gather permute to the layout the communicators gather in, and
// the 1.5D linear layer transposes its output blocks.
//
// Every tensor is contiguous (core/tensor.h); the ops read and write strided boxes of them
// (kernels/layout_bodies.h). Results are exact: a copy moves the bits, an add is one float
// addition per element.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/layout_bodies.h"

namespace gridnn::ops {

// dst = src with its dimensions reordered: dst.size(i) == src.size(perm[i]), perm a
// permutation of 0..rank-1. Any dtype; dst must not share memory with src.
void permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst);
Tensor permute(const Tensor& src, const std::vector<int>& perm);

// Slices [dst_first, dst_first + count) of dst along `dim` = (copy) or += (add) slices
// [src_first, src_first + count) of src along `dim`. src and dst agree in dtype, device and
// every other dimension, and must not share memory; add needs a floating dtype.
void copy_slices(const Tensor& src, int dim, int64_t src_first, Tensor& dst, int64_t dst_first, int64_t count);
void add_slices(const Tensor& src, int dim, int64_t src_first, Tensor& dst, int64_t dst_first, int64_t count);
// Slices [first, first + count) of t along `dim` = value (any dtype).
void fill_slices(Tensor& t, int dim, int64_t first, int64_t count, double value);
// A new tensor holding slices [first, first + count) of t along `dim` (same device).
Tensor slice(const Tensor& t, int dim, int64_t first, int64_t count);

}  // namespace gridnn::ops

// Backend entry points: src may be undefined for a fill (then `value` is written).
namespace gridnn::kernels::cpu {
void strided_move(const Tensor& src, Tensor& dst, const StridedBox& box, LayoutMode mode);
void strided_fill(Tensor& dst, const StridedBox& box, double value);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void strided_move(const Tensor& src, Tensor& dst, const StridedBox& box, LayoutMode mode);
void strided_fill(Tensor& dst, const StridedBox& box, double value);
}  // namespace gridnn::kernels::cuda
