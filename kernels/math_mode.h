// The arithmetic precision of a GEMM or convolution on f32 tensors (docs/design.md §3: reduced
// precision is an explicit option, never silent).
//
//   fp32  IEEE fp32 multiply-add (the default; deterministic, the CPU's and the GPU's
//         results agree to accumulation order). On the GPU: cuBLAS CUBLAS_COMPUTE_32F,
//         cuDNN CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would let cuDNN pick TF32 on its own).
//   tf32  operands rounded to TF32 (10 mantissa bits), products accumulated in fp32, fp32
//         out: cuBLAS CUBLAS_COMPUTE_32F_FAST_TF32, cuDNN CUDNN_TENSOR_OP_MATH on fp32 data.
//         About 1e-3 relative error. The CPU emulates it: operands rounded to nearest even at
//         10 bits, then the fp32 path (the GPU's tensor cores may round differently).
//   bf16  operands rounded to bf16 (8 mantissa bits, round to nearest even), products
//         accumulated in fp32, fp32 out (cuBLAS: bf16 scratch copies of A and B, CUDA_R_16BF
//         inputs, CUDA_R_32F output, CUBLAS_COMPUTE_32F; cuDNN: see kernels/conv3d.h). The
//         CPU emulates it the same way, so it is the reference for the GPU: a product of two
//         bf16 (or two tf32) values is exact in fp32, so the two differ only in the order
//         of the fp32 additions.
// Only the operands are rounded: parameters stay fp32 (master weights), gradients are fp32.
// The mode applies to f32 tensors; f16 and bf16 tensors always multiply in their own
// format with fp32 accumulation.
#pragma once

#include "core/half.h"
#include "core/hd.h"
#include "core/names.h"

namespace gridnn::ops {

enum class MathMode { fp32, tf32, bf16 };

inline constexpr EnumName<MathMode> kMathModeNames[] = {
    {MathMode::fp32, "fp32", "the default, exact fp32"}, {MathMode::tf32, "tf32"}, {MathMode::bf16, "bf16"}};
constexpr EnumNames<MathMode> enum_names(MathMode) { return {"math mode", kMathModeNames}; }

inline const char* str(MathMode m) { return enum_name(m); }

// The value an f32 operand takes in mode `m`: x itself (fp32), or x rounded to nearest even
// at 10 (tf32) or 7 (bf16) stored mantissa bits. NaN and infinities pass through.
GRIDNN_HD GRIDNN_INLINE float round_operand(float x, MathMode m) {
  if (m == MathMode::bf16) return float(bf16(x));
  if (m != MathMode::tf32) return x;
  const uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf or NaN
  const uint32_t rounding = 0xfffu + ((u >> 13) & 1u);
  return bits_float((u + rounding) & 0xffffe000u);
}

}  // namespace gridnn::ops
