// Matrix products: C = alpha * op(A) * op(B) + beta * C, row-major, op = transpose or not.
//
// Backends: oneDNN's dnnl_sgemm on the CPU (OpenBLAS's cblas_sgemm in a build without
// oneDNN); cuBLAS (cublasGemmStridedBatchedEx) on the GPU. f16 and bf16 operands accumulate
// in f32 (on the CPU they are widened to f32 first).
//
// Precision of f32 products (GemmOptions::math, kernels/math_mode.h): fp32 by default;
// tf32 and bf16 only when asked for (docs/design.md §3). bf16 on the GPU casts A and B into bf16
// scratch tensors (caching allocator) and multiplies them with f32 accumulation into the
// f32 C. The CPU emulates tf32 and bf16 by rounding A and B (scratch copies) and running
// the fp32 GEMM: the reference the GPU's reduced-precision results are tested against.
#pragma once

#include "core/tensor.h"
#include "kernels/math_mode.h"

namespace gridnn::ops {

struct GemmOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C is overwritten (its old values are never read, NaN included)
  MathMode math = MathMode::fp32;
};

// GemmOptions from the fields layers set most: gemm(a, b, c, gemm_options(false, true)).
inline GemmOptions gemm_options(bool transpose_a, bool transpose_b, float beta = 0.0f, MathMode math = MathMode::fp32) {
  GemmOptions o;
  o.transpose_a = transpose_a;
  o.transpose_b = transpose_b;
  o.beta = beta;
  o.math = math;
  return o;
}

// A, B, C are 2-D: op(A) is [m, k], op(B) is [k, n], C is [m, n].
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& options = {});
// Batched: C is [batch, m, n]; A and B are [batch, ., .] or 2-D (the same matrix for every
// batch entry, stride 0).
void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& options = {});

}  // namespace gridnn::ops

namespace gridnn::kernels {
// A fully resolved strided-batched problem (row-major; strides in elements).
struct GemmProblem {
  int64_t batch, m, n, k;
  bool transpose_a, transpose_b;
  int64_t lda, ldb, ldc;                 // leading dimensions (row strides)
  int64_t stride_a, stride_b, stride_c;  // between batch entries (0: shared)
  float alpha, beta;
  ops::MathMode math;
};
// One row-major fp32 matrix, C [m, n] (row stride ldc) = op(A) op(B) + beta C.
inline GemmProblem matrix_problem(int64_t m, int64_t n, int64_t k, bool transpose_a, int64_t lda, bool transpose_b,
                                  int64_t ldb, int64_t ldc, float beta) {
  return {1, m, n, k, transpose_a, transpose_b, lda, ldb, ldc, 0, 0, 0, 1.0f, beta, ops::MathMode::fp32};
}
}  // namespace gridnn::kernels

namespace gridnn::kernels::cpu {
void gemm(const GemmProblem& p, const Tensor& a, const Tensor& b, Tensor& c);
// One row-major f32 matrix (p.batch and p.math not read), C = alpha op(A) op(B) + beta C,
// k > 0. Inside an OpenMP parallel region it runs on the calling thread alone.
void sgemm(const GemmProblem& p, const float* a, const float* b, float* c);
// An f32 tensor's values as an operand in `math` takes them (ops::round_operand): `t`
// itself for fp32 or a non-f32 dtype, else a rounded copy. For the CPU emulation of tf32
// and bf16 (here and in the CPU convolution).
Tensor rounded_operand(const Tensor& t, ops::MathMode math);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {
void gemm(const GemmProblem& p, const Tensor& a, const Tensor& b, Tensor& c);
}
