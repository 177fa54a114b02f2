#include "kernels/elementwise.h"

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

void fill(Tensor& t, double value) {
  expect_defined("fill", "t", t);
  GRIDNN_BACKEND_CALL(t.device(), fill, t, value);
}

void copy(const Tensor& src, Tensor& dst) { dst.copy_from(src); }

void cast(const Tensor& src, Tensor& dst) {
  expect_defined("cast", "src", src);
  expect_defined("cast", "dst", dst);
  expect_same_device("cast", src, dst);
  expect_same_shape("cast", src, dst);
  if (src.dtype() == dst.dtype())
    expect_no_partial_overlap("cast", src, dst);
  else  // element sizes differ: even the same start would read what was just written
    expect_disjoint("cast", src, dst);
  GRIDNN_BACKEND_CALL(src.device(), cast, src, dst);
}

Tensor cast(const Tensor& src, DType dtype) {
  expect_defined("cast", "src", src);
  Tensor dst = Tensor::empty(src.shape(), dtype, src.device());
  cast(src, dst);
  return dst;
}

namespace {
void run_binary(const char* name, BinaryOp op, float param, const Tensor& a, const Tensor& b, Tensor& out) {
  expect_elementwise(name, a, b);
  expect_elementwise(name, a, out);
  expect_no_partial_overlap(name, a, out);
  expect_no_partial_overlap(name, b, out);
  GRIDNN_BACKEND_CALL(a.device(), binary, op, param, a, b, out);
}
void run_unary(const char* name, UnaryOp op, float param, const Tensor& x, Tensor& out) {
  expect_elementwise(name, x, out);
  expect_no_partial_overlap(name, x, out);
  GRIDNN_BACKEND_CALL(x.device(), unary, op, param, x, out);
}
}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) { run_binary("add", BinaryOp::add, 0, a, b, out); }
void mul(const Tensor& a, const Tensor& b, Tensor& out) { run_binary("mul", BinaryOp::mul, 0, a, b, out); }
void axpy(float alpha, const Tensor& x, Tensor& y) { run_binary("axpy", BinaryOp::axpy, alpha, x, y, y); }
void scale(Tensor& x, float alpha) { run_unary("scale", UnaryOp::scale, alpha, x, x); }

void relu_forward(const Tensor& x, Tensor& y) { run_unary("relu_forward", UnaryOp::relu, 0, x, y); }
void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  run_binary("relu_backward", BinaryOp::relu_backward, 0, x, dy, dx);
}

}  // namespace gridnn::ops
