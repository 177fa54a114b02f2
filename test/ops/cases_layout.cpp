// kernels/layout.h: every permutation of a 3-D and a 5-D tensor, every dtype, a transpose
// large enough to be split over threads; slabs of slices along each dimension of a 5-D
// tensor copied, added and filled; slice. Exact on both backends (a copy moves bits, an
// add is one float addition).
#include <algorithm>
#include <numeric>

#include "kernels/layout.h"
#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

std::vector<int64_t> index_of(int64_t i, const Shape& shape) {
  std::vector<int64_t> c(size_t(shape.rank()));
  for (int k = shape.rank() - 1; k >= 0; --k) {
    c[size_t(k)] = i % shape[k];
    i /= shape[k];
  }
  return c;
}
int64_t flat_of(const std::vector<int64_t>& c, const Shape& shape) {
  int64_t i = 0;
  for (int k = 0; k < shape.rank(); ++k) i = i * shape[k] + c[size_t(k)];
  return i;
}
std::string perm_name(const std::vector<int>& perm) {
  std::string s;
  for (int p : perm) s += std::to_string(p);
  return s;
}

OpCase exact(OpCase c) {
  c.ref_tol = {0, 0};
  c.bitwise = true;
  return c;
}

OpCase permute_case(const Shape& shape, const std::vector<int>& perm, DType dt) {
  OpCase c;
  c.op = "permute";
  c.params = shape_name(shape) + " to " + perm_name(perm) + " " + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{case_input(key, 0, shape, -100, 100, dt)}; };
  c.run = [perm](const Tensors& in) { return Tensors{ops::permute(in[0], perm)}; };
  c.reference = [=](const Tensors& in) {
    const Doubles x = values(in[0]);
    std::vector<int64_t> out_dims;
    for (int p : perm) out_dims.push_back(shape[p]);
    const Shape out_shape(out_dims);
    Doubles y(x.size());
    for (int64_t i = 0; i < out_shape.numel(); ++i) {
      const std::vector<int64_t> at = index_of(i, out_shape);
      std::vector<int64_t> src(at.size());
      for (size_t k = 0; k < at.size(); ++k) src[size_t(perm[k])] = at[k];
      y[size_t(i)] = x[size_t(flat_of(src, shape))];
    }
    return std::vector<Doubles>{y};
  };
  if (dt == DType::f32) {  // the gradient of a permutation is the inverse permutation
    c.backward = [perm](const Tensors&, const Tensor& dy) {
      std::vector<int> inverse(perm.size());
      for (size_t k = 0; k < perm.size(); ++k) inverse[size_t(perm[k])] = int(k);
      return Tensors{ops::permute(dy, inverse)};
    };
    c.grad_inputs = {0};
  }
  return exact(c);
}

enum class SlabOp { copy, add, fill };

// Slices [1, 1 + count) of a source copied, added or (fill) -7.5 written into slices
// [2, 2 + count) of a destination 3 larger along `dim`.
OpCase slab_case(SlabOp what, int dim, DType dt) {
  const Shape src_shape{3, 4, 9, 5, 6};
  const Shape dst_shape = src_shape.with(dim, src_shape[dim] + 3);
  const int64_t count = src_shape[dim] - 1, src_first = 1, dst_first = 2;
  OpCase c;
  c.op = what == SlabOp::copy ? "copy_slices" : what == SlabOp::add ? "add_slices" : "fill_slices";
  c.params = "dim " + std::to_string(dim) + " " + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    return Tensors{case_input(key, 0, src_shape, -3, 3, dt), case_input(key, 1, dst_shape, -3, 3, dt)};
  };
  c.run = [=](const Tensors& in) {
    Tensor dst = in[1].clone();
    if (what == SlabOp::copy) ops::copy_slices(in[0], dim, src_first, dst, dst_first, count);
    if (what == SlabOp::add) ops::add_slices(in[0], dim, src_first, dst, dst_first, count);
    if (what == SlabOp::fill) ops::fill_slices(dst, dim, dst_first, count, -7.5);
    return Tensors{dst};
  };
  c.reference = [=](const Tensors& in) {
    const Doubles src = values(in[0]);
    Doubles dst = values(in[1]);
    for (int64_t i = 0; i < dst_shape.numel(); ++i) {
      std::vector<int64_t> at = index_of(i, dst_shape);
      const int64_t k = at[size_t(dim)] - dst_first;
      if (k < 0 || k >= count) continue;
      at[size_t(dim)] = k + src_first;
      const double s = src[size_t(flat_of(at, src_shape))];
      double& d = dst[size_t(i)];
      d = what == SlabOp::copy ? s : what == SlabOp::fill ? -7.5 : double(float(d) + float(s));
    }
    return std::vector<Doubles>{dst};
  };
  c = exact(c);
  if (what == SlabOp::add && dt != DType::f32) c.ref_tol = stored_tolerance(dt);  // the sum rounds to 16 bits
  return c;
}

}  // namespace

void add_layout_cases(OpCases& cases) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 3, 4, 1, 5}}) {
    std::vector<int> perm(size_t(shape.rank()));
    std::iota(perm.begin(), perm.end(), 0);
    do cases.push_back(permute_case(shape, perm, DType::f32));
    while (std::next_permutation(perm.begin(), perm.end()));
  }
  for (DType dt : {DType::f16, DType::bf16, DType::i32, DType::i64})
    cases.push_back(permute_case({67, 45, 33}, {2, 0, 1}, dt));
  cases.push_back(permute_case({301, 257}, {1, 0}, DType::f32));  // split over threads

  for (int dim = 0; dim < 5; ++dim) {
    for (SlabOp what : {SlabOp::copy, SlabOp::add, SlabOp::fill}) cases.push_back(slab_case(what, dim, DType::f32));
    cases.push_back(slab_case(SlabOp::copy, dim, DType::i64));
    cases.push_back(slab_case(SlabOp::add, dim, DType::bf16));
    cases.push_back(slab_case(SlabOp::fill, dim, DType::f16));
  }

  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
    OpCase c;
    c.op = "slice";
    c.params = "2x3x40x33x17 dim 2 from 7 count 20 " + std::string(dtype_name(dt));
    const std::string key = c.op + c.params;
    c.make_inputs = [=] { return Tensors{case_input(key, 0, {2, 3, 40, 33, 17}, -3, 3, dt)}; };
    c.run = [](const Tensors& in) { return Tensors{ops::slice(in[0], 2, 7, 20)}; };
    c.reference = [](const Tensors& in) {
      const Doubles x = values(in[0]);
      Doubles y;
      for (int64_t outer = 0; outer < 6; ++outer)
        for (int64_t d = 7; d < 27; ++d) {
          const auto first = x.begin() + (outer * 40 + d) * 33 * 17;
          y.insert(y.end(), first, first + 33 * 17);
        }
      return std::vector<Doubles>{y};
    };
    cases.push_back(exact(c));
  }
}

}  // namespace gridnn::test
