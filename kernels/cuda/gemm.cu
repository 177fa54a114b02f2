// CUDA backend of kernels/gemm.h: one cublasGemmStridedBatchedEx call per problem.
//
// cuBLAS is column-major. A row-major [r, c] matrix with row stride ld is, read
// column-major, its transpose [c, r] with the same ld. So the row-major product
// C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T: swap the
// operands (B first), swap m and n, keep each operand's own transpose flag and ld.
//
// Precision: operands and C in CUDA_R_32F / CUDA_R_16F / CUDA_R_16BF, alpha and beta
// float, accumulation in f32 (CUBLAS_COMPUTE_32F). Reduced precision for f32 tensors only
// when asked for (docs/design.md §3, kernels/math_mode.h):
//   MathMode::tf32 -> CUBLAS_COMPUTE_32F_FAST_TF32 on the f32 operands;
//   MathMode::bf16 -> A and B cast (round to nearest even) into bf16 scratch tensors from
//                     the caching allocator, CUDA_R_16BF inputs, CUDA_R_32F C,
//                     CUBLAS_COMPUTE_32F.
// 16-bit tensors use tensor cores with f32 accumulation in every mode.
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace gridnn::kernels::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      throw_unsupported_dtype("gemm", t, "f32, f16 or bf16");
  }
}

// k == 0: op(A) op(B) is empty, so C = beta * C (beta == 0: zeros, old values not read).
void scale_only(const GemmProblem& p, Tensor& c) {
  if (p.beta == 0.0f) {
    auto& ctx = detail::context_of(c);
    GRIDNN_CHECK_CUDA(cudaMemsetAsync(c.raw(), 0, c.nbytes(), ctx.stream));
  } else if (p.beta != 1.0f) {
    unary(UnaryOp::scale, p.beta, c, c);
  }
}

// A bf16 copy of an f32 operand (the same layout, so its ld and batch stride still hold).
Tensor bf16_copy(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::bf16, t.device());
  cast(t, out);
  return out;
}

}  // namespace

void gemm(const GemmProblem& p, const Tensor& a, const Tensor& b, Tensor& c) {
  if (p.k == 0) return scale_only(p, c);
  auto& ctx = detail::context_of(c);  // makes the device current; the handle is on ctx.stream
  const bool f32 = c.dtype() == DType::f32;
  const bool bf16_math = f32 && p.math == ops::MathMode::bf16;
  // Scratch for bf16 math; held until the call is queued (the caching allocator reuses
  // blocks in stream order).
  const Tensor a_op = bf16_math ? bf16_copy(a) : a;
  const Tensor b_op = bf16_math ? bf16_copy(b) : b;
  const cudaDataType_t in_type = cuda_type(a_op.dtype()), out_type = cuda_type(c.dtype());
  const cublasComputeType_t compute =
      (f32 && p.math == ops::MathMode::tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Column-major C^T [n, m] = op(B)^T [n, k] * op(A)^T [k, m].
  const cublasOperation_t op_first = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float alpha = p.alpha, beta = p.beta;
  GRIDNN_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      ctx.cublas, op_first, op_second, int(p.n), int(p.m), int(p.k), &alpha, b_op.raw(), in_type, int(p.ldb),
      static_cast<long long>(p.stride_b), a_op.raw(), in_type, int(p.lda), static_cast<long long>(p.stride_a), &beta,
      c.raw(), out_type, int(p.ldc), static_cast<long long>(p.stride_c), int(p.batch), compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace gridnn::kernels::cuda
