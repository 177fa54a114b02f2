// The body of the layout ops (kernels/layout.h), written once for host and device: a box of
// elements copied between two strided views of contiguous tensors. Element i of the box
// (row-major over its sizes) is read at src_offset + sum_k c_k src_stride[k] and written at
// dst_offset + sum_k c_k dst_stride[k], where c is i's multi-index. A permute, a slab of
// planes and its gradient's return are all such boxes.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/hd.h"

namespace gridnn::kernels {

constexpr int kLayoutMaxDims = 5;

struct StridedBox {
  int rank = 0;  // 0: one element
  int64_t size[kLayoutMaxDims] = {};
  int64_t src_stride[kLayoutMaxDims] = {};
  int64_t dst_stride[kLayoutMaxDims] = {};
  int64_t src_offset = 0, dst_offset = 0;  // in elements
  int64_t numel() const {
    int64_t n = 1;
    for (int k = 0; k < rank; ++k) n *= size[k];
    return n;
  }
};

enum class LayoutMode { copy, add };  // dst = src, or dst += src (floating dtypes, in float)

namespace body {

// Where element i of the box is read and written.
GRIDNN_HD GRIDNN_INLINE void box_offsets(const StridedBox& b, int64_t i, int64_t* src, int64_t* dst) {
  int64_t s = b.src_offset, d = b.dst_offset;
  for (int k = b.rank - 1; k >= 0; --k) {
    const int64_t c = i % b.size[k];
    i /= b.size[k];
    s += c * b.src_stride[k];
    d += c * b.dst_stride[k];
  }
  *src = s;
  *dst = d;
}

template <class T>
GRIDNN_HD GRIDNN_INLINE void move_element(const T* src, T* dst, LayoutMode mode) {
  if (mode == LayoutMode::copy)
    *dst = *src;
  else
    *dst = from_float<T>(to_float(*dst) + to_float(*src));
}

}  // namespace body
}  // namespace gridnn::kernels
