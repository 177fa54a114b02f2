// Fill, copy, cast and element-wise arithmetic.
//
// Outputs are passed in (allocated by the caller, same device as the inputs) and may
// alias an input: add(a, b, a) is an in-place add. Arithmetic ops take f32, f16 or bf16
// and compute in f32.
#pragma once

#include "core/tensor.h"
#include "kernels/elementwise_bodies.h"

namespace gridnn::ops {

void fill(Tensor& t, double value);           // any dtype
void copy(const Tensor& src, Tensor& dst);    // same shape and dtype, any devices
void cast(const Tensor& src, Tensor& dst);    // same shape and device, any dtypes
Tensor cast(const Tensor& src, DType dtype);  // new tensor

void add(const Tensor& a, const Tensor& b, Tensor& out);  // out = a + b
void mul(const Tensor& a, const Tensor& b, Tensor& out);  // out = a * b
void axpy(float alpha, const Tensor& x, Tensor& y);       // y += alpha * x
void scale(Tensor& x, float alpha);                       // x *= alpha

// ReLU, with the forward input kept for the backward (docs/design.md §10: forward and backward
// side by side).
void relu_forward(const Tensor& x, Tensor& y);                      // y = max(x, 0)
void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);  // dx = dy * (x > 0)

}  // namespace gridnn::ops

// Backend entry points, called by the ops above after their checks.
namespace gridnn::kernels::cpu {
void fill(Tensor& t, double value);
void cast(const Tensor& src, Tensor& dst);
void unary(UnaryOp op, float param, const Tensor& x, Tensor& out);
void binary(BinaryOp op, float param, const Tensor& a, const Tensor& b, Tensor& out);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void fill(Tensor& t, double value);
void cast(const Tensor& src, Tensor& dst);
void unary(UnaryOp op, float param, const Tensor& x, Tensor& out);
void binary(BinaryOp op, float param, const Tensor& a, const Tensor& b, Tensor& out);
}  // namespace gridnn::kernels::cuda
