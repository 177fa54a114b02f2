// Matrix products: C = alpha * op(A) * op(B) + beta * C, row-major, op = transpose or not.
//
// Backends: OpenBLAS (cblas_sgemm) on the CPU; cuBLAS (cublasGemmStridedBatchedEx) on the
// GPU. f16 and bf16 operands accumulate in f32 (on the CPU they are widened to f32 first).
// TF32 tensor-core math is used only when asked for with MathMode::tf32 (DESIGN §3);
// on the CPU tf32 computes in full fp32.
#pragma once

#include "core/tensor.h"

namespace gridnn::ops {

enum class MathMode { fp32, tf32 };

struct GemmOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C is overwritten (its old values are never read, NaN included)
  MathMode math = MathMode::fp32;
};

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
  int64_t lda, ldb, ldc;                  // leading dimensions (row strides)
  int64_t stride_a, stride_b, stride_c;   // between batch entries (0: shared)
  float alpha, beta;
  ops::MathMode math;
};
}  // namespace gridnn::kernels

namespace gridnn::kernels::cpu {
void gemm(const GemmProblem& p, const Tensor& a, const Tensor& b, Tensor& c);
}
namespace gridnn::kernels::cuda {
void gemm(const GemmProblem& p, const Tensor& a, const Tensor& b, Tensor& c);
}
