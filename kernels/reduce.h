// Reductions along one dimension: sum, sum of squares, max. Deterministic: the order of
// every addition is fixed (kernels/reduce_bodies.h), the same on every run and backend.
#pragma once

#include "core/tensor.h"
#include "kernels/reduce_bodies.h"

namespace gridnn::ops {

using kernels::ReduceOp;

// out = reduction of x over dimension `dim`; out has x's shape with that dimension
// removed (keepdim = false) or set to 1. Floating dtypes; accumulation in f32; out has
// x's dtype.
void reduce(ReduceOp op, const Tensor& x, int dim, Tensor& out);
Tensor reduce(ReduceOp op, const Tensor& x, int dim, bool keepdim = false);

Tensor sum(const Tensor& x, int dim, bool keepdim = false);
Tensor sum_squares(const Tensor& x, int dim, bool keepdim = false);
Tensor max(const Tensor& x, int dim, bool keepdim = false);
// Over all elements: a one-element tensor of shape [1].
Tensor sum_all(const Tensor& x);
Tensor sum_squares_all(const Tensor& x);
Tensor max_all(const Tensor& x);

}  // namespace gridnn::ops

namespace gridnn::kernels::cpu {
void reduce(ReduceOp op, const Tensor& x, body::ReduceShape shape, Tensor& out);
}
namespace gridnn::kernels::cuda {
void reduce(ReduceOp op, const Tensor& x, body::ReduceShape shape, Tensor& out);
}
