#include "kernels/reduce.h"

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {
Shape reduced_shape(const Shape& in, int dim, bool keepdim) {
  std::vector<int64_t> d = in.dims();
  if (keepdim)
    d[dim] = 1;
  else
    d.erase(d.begin() + dim);
  return Shape(d);
}

int normalize_dim(const Tensor& x, int dim) {
  int r = x.rank();
  GRIDNN_REQUIRE(r >= 1, "reduce: cannot reduce a scalar tensor ", x.str(), " along a dimension");
  GRIDNN_REQUIRE(dim >= -r && dim < r, "reduce: dimension ", dim, " is out of range for ", x.str());
  return dim < 0 ? dim + r : dim;
}
}  // namespace

void reduce(ReduceOp op, const Tensor& x, int dim, Tensor& out) {
  expect_defined("reduce", "x", x);
  expect_defined("reduce", "out", out);
  expect_floating("reduce", x);
  expect_same_device("reduce", x, out);
  expect_same_dtype("reduce", x, out);
  expect_disjoint("reduce", x, out);
  int d = normalize_dim(x, dim);
  const Shape& s = x.shape();
  body::ReduceShape g{1, s[d], 1};
  for (int i = 0; i < d; ++i) g.outer *= s[i];
  for (int i = d + 1; i < s.rank(); ++i) g.inner *= s[i];
  GRIDNN_REQUIRE(out.numel() == g.outer * g.inner, "reduce: output ", out.str(),
                 " has the wrong size for reducing dimension ", d, " of ", x.str(), "; expected ",
                 reduced_shape(s, d, false).str());
  GRIDNN_REQUIRE(g.len > 0 || op != ReduceOp::max, "reduce: max over an empty dimension of ", x.str());
  GRIDNN_BACKEND_CALL(x.device(), reduce, op, x, g, out);
}

Tensor reduce(ReduceOp op, const Tensor& x, int dim, bool keepdim) {
  expect_defined("reduce", "x", x);
  int d = normalize_dim(x, dim);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), d, keepdim), x.dtype(), x.device());
  reduce(op, x, d, out);
  return out;
}

Tensor sum(const Tensor& x, int dim, bool keepdim) { return reduce(ReduceOp::sum, x, dim, keepdim); }
Tensor sum_squares(const Tensor& x, int dim, bool keepdim) { return reduce(ReduceOp::sum_squares, x, dim, keepdim); }
Tensor max(const Tensor& x, int dim, bool keepdim) { return reduce(ReduceOp::max, x, dim, keepdim); }

namespace {
Tensor reduce_all(ReduceOp op, const Tensor& x) {
  expect_defined("reduce", "x", x);
  return reduce(op, x.reshape({x.numel()}), 0, true);
}
}  // namespace

Tensor sum_all(const Tensor& x) { return reduce_all(ReduceOp::sum, x); }
Tensor sum_squares_all(const Tensor& x) { return reduce_all(ReduceOp::sum_squares, x); }
Tensor max_all(const Tensor& x) { return reduce_all(ReduceOp::max, x); }

}  // namespace gridnn::ops
