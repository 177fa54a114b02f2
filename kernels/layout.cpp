// Argument checks of kernels/layout.h, the strided boxes they describe, and the dispatch to
// the CPU or CUDA backend.
#include "kernels/layout.h"

#include <algorithm>

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

// Merges neighbouring dimensions that both views walk contiguously (a run of whole planes
// becomes one long row), so the backends index fewer dimensions.
StridedBox coalesced(StridedBox b) {
  StridedBox out;
  out.src_offset = b.src_offset;
  out.dst_offset = b.dst_offset;
  for (int k = 0; k < b.rank; ++k) {
    if (b.size[k] == 1) continue;
    const int last = out.rank - 1;
    if (last >= 0 && out.src_stride[last] == b.size[k] * b.src_stride[k] &&
        out.dst_stride[last] == b.size[k] * b.dst_stride[k]) {
      out.size[last] *= b.size[k];
      out.src_stride[last] = b.src_stride[k];
      out.dst_stride[last] = b.dst_stride[k];
    } else {
      out.size[out.rank] = b.size[k];
      out.src_stride[out.rank] = b.src_stride[k];
      out.dst_stride[out.rank] = b.dst_stride[k];
      ++out.rank;
    }
  }
  return out;
}

// The box of `count` slices along `dim`, starting at slice src_first of a tensor shaped
// `src` and slice dst_first of one shaped `dst` (the other dimensions equal).
StridedBox slab(const Shape& src, int64_t src_first, const Shape& dst, int64_t dst_first, int dim, int64_t count) {
  StridedBox b;
  b.rank = src.rank();
  for (int k = 0; k < b.rank; ++k) {
    b.size[k] = k == dim ? count : src[k];
    b.src_stride[k] = src.stride(k);
    b.dst_stride[k] = dst.stride(k);
  }
  b.src_offset = src_first * src.stride(dim);
  b.dst_offset = dst_first * dst.stride(dim);
  return coalesced(b);
}

int checked_dim(const char* op, const Tensor& t, int dim) {
  GRIDNN_REQUIRE(t.rank() >= 1 && dim >= -t.rank() && dim < t.rank(), op, ": dimension ", dim, " is out of range for ",
                 t.str());
  return dim < 0 ? dim + t.rank() : dim;
}

void check_range(const char* op, const Tensor& t, int dim, int64_t first, int64_t count) {
  GRIDNN_REQUIRE(count >= 0 && first >= 0 && first + count <= t.size(dim), op, ": slices [", first, ", ", first + count,
                 ") along dimension ", dim, " are out of range for ", t.str());
}

void move_slices(const char* op, const Tensor& src, int dim, int64_t src_first, Tensor& dst, int64_t dst_first,
                 int64_t count, LayoutMode mode) {
  expect_defined(op, "src", src);
  expect_defined(op, "dst", dst);
  expect_same_device(op, src, dst);
  expect_same_dtype(op, src, dst);
  expect_disjoint(op, src, dst);
  if (mode == LayoutMode::add) expect_floating(op, dst);
  const int d = checked_dim(op, src, dim);
  GRIDNN_REQUIRE(src.rank() == dst.rank(), op, ": ", src.str(), " and ", dst.str(), " differ in rank");
  for (int k = 0; k < src.rank(); ++k)
    GRIDNN_REQUIRE(k == d || src.size(k) == dst.size(k), op, ": ", src.str(), " and ", dst.str(),
                   " differ in dimension ", k, " (only dimension ", d, " may differ)");
  check_range(op, src, d, src_first, count);
  check_range(op, dst, d, dst_first, count);
  const StridedBox box = slab(src.shape(), src_first, dst.shape(), dst_first, d, count);
  if (box.numel() == 0) return;
  GRIDNN_BACKEND_CALL(src.device(), strided_move, src, dst, box, mode);
}

}  // namespace

void permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) {
  expect_defined("permute", "src", src);
  expect_defined("permute", "dst", dst);
  expect_same_device("permute", src, dst);
  expect_same_dtype("permute", src, dst);
  expect_disjoint("permute", src, dst);
  const int r = src.rank();
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool valid = int(perm.size()) == r;
  for (int k = 0; valid && k < r; ++k) valid = sorted[size_t(k)] == k;
  GRIDNN_REQUIRE(valid, "permute: the order of dimensions must name each of the ", r, " dimensions of ", src.str(),
                 " once");
  StridedBox b;
  b.rank = r;
  for (int k = 0; k < r; ++k) {
    b.size[k] = src.size(perm[size_t(k)]);
    b.src_stride[k] = src.shape().stride(perm[size_t(k)]);
    GRIDNN_REQUIRE(dst.rank() == r && dst.size(k) == b.size[k], "permute: ", dst.str(), " is not the shape of ",
                   src.str(), " permuted");
    b.dst_stride[k] = dst.shape().stride(k);
  }
  b = coalesced(b);
  if (src.numel() == 0) return;
  GRIDNN_BACKEND_CALL(src.device(), strided_move, src, dst, b, LayoutMode::copy);
}

Tensor permute(const Tensor& src, const std::vector<int>& perm) {
  expect_defined("permute", "src", src);
  std::vector<int64_t> dims;
  for (int p : perm) {
    GRIDNN_REQUIRE(p >= 0 && p < src.rank(), "permute: dimension ", p, " is out of range for ", src.str());
    dims.push_back(src.size(p));
  }
  Tensor dst = Tensor::empty(Shape(dims), src.dtype(), src.device());
  permute(src, perm, dst);
  return dst;
}

void copy_slices(const Tensor& src, int dim, int64_t src_first, Tensor& dst, int64_t dst_first, int64_t count) {
  move_slices("copy_slices", src, dim, src_first, dst, dst_first, count, LayoutMode::copy);
}

void add_slices(const Tensor& src, int dim, int64_t src_first, Tensor& dst, int64_t dst_first, int64_t count) {
  move_slices("add_slices", src, dim, src_first, dst, dst_first, count, LayoutMode::add);
}

void fill_slices(Tensor& t, int dim, int64_t first, int64_t count, double value) {
  expect_defined("fill_slices", "t", t);
  const int d = checked_dim("fill_slices", t, dim);
  check_range("fill_slices", t, d, first, count);
  const StridedBox box = slab(t.shape(), first, t.shape(), first, d, count);
  if (box.numel() == 0) return;
  GRIDNN_BACKEND_CALL(t.device(), strided_fill, t, box, value);
}

Tensor slice(const Tensor& t, int dim, int64_t first, int64_t count) {
  expect_defined("slice", "t", t);
  const int d = checked_dim("slice", t, dim);
  check_range("slice", t, d, first, count);
  Tensor out = Tensor::empty(t.shape().with(d, count), t.dtype(), t.device());
  copy_slices(t, d, first, out, 0, count);
  return out;
}

}  // namespace gridnn::ops
