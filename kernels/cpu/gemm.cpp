// CPU backend of kernels/gemm.h: OpenBLAS cblas_sgemm per batch entry. f16/bf16 operands
// are widened to f32, multiplied, and narrowed back (f32 accumulation as on the GPU).
// tf32 and bf16 math on f32 operands is emulated: A and B rounded into scratch copies,
// then the same fp32 sgemm (kernels/math_mode.h).
#include "kernels/gemm.h"

#include <cblas.h>

#include <cstdio>

#include "kernels/cpu/parallel_for.h"
#include "kernels/elementwise.h"

// OpenBLAS's own queries, weak so that another BLAS links too (they are then null).
// NOLINTBEGIN(readability-redundant-declaration): cblas.h declares them, not weak
extern "C" int openblas_get_parallel(void) __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
// NOLINTEND(readability-redundant-declaration)

namespace gridnn::kernels::cpu {
namespace {

// One thread pool: OpenBLAS's OpenMP build (openblas_get_parallel() == 2) runs on
// libgomp's threads like gridnn's loops and oneDNN. Its pthread build would start a second
// pool that fights the first (4-27x slower convolutions on 2 cores, bench/RESULTS.md):
// then BLAS runs on one thread, with a notice.
void keep_one_thread_pool() {
  static const bool checked = [] {
    if (openblas_get_parallel && openblas_set_num_threads && openblas_get_parallel() == 1) {
      openblas_set_num_threads(1);
      std::fprintf(stderr,
                   "gridnn: the OpenBLAS loaded is its pthread build, whose threads would compete "
                   "with OpenMP's; GEMMs run on one thread. Install libopenblas0-openmp and "
                   "rebuild for threaded GEMMs.\n");
    }
    return true;
  }();
  (void)checked;
}

void sgemm_batched(const GemmProblem& p, const float* a, const float* b, float* c) {
  keep_one_thread_pool();
  const CBLAS_TRANSPOSE ta = p.transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = p.transpose_b ? CblasTrans : CblasNoTrans;
  for (int64_t i = 0; i < p.batch; ++i) {
    float* ci = c + i * p.stride_c;
    if (p.k == 0) {  // BLAS may skip the beta scaling when k == 0; do it explicitly
      for (int64_t j = 0; j < p.m * p.n; ++j) ci[j] = p.beta == 0.0f ? 0.0f : p.beta * ci[j];
      continue;
    }
    cblas_sgemm(CblasRowMajor, ta, tb, int(p.m), int(p.n), int(p.k), p.alpha, a + i * p.stride_a, int(p.lda),
                b + i * p.stride_b, int(p.ldb), p.beta, ci, int(p.ldc));
  }
}

Tensor widen(const Tensor& t) { return t.dtype() == DType::f32 ? t : ops::cast(t, DType::f32); }

}  // namespace

Tensor rounded_operand(const Tensor& t, ops::MathMode math) {
  if (math == ops::MathMode::fp32 || t.dtype() != DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32, t.device());
  const float* in = t.data<float>();
  float* o = out.data<float>();
  parallel_for(t.numel(), [&](int64_t i) { o[i] = ops::round_operand(in[i], math); });
  return out;
}

void gemm(const GemmProblem& p, const Tensor& a, const Tensor& b, Tensor& c) {
  if (c.dtype() == DType::f32) {
    const Tensor ra = rounded_operand(a, p.math), rb = rounded_operand(b, p.math);
    sgemm_batched(p, ra.data<float>(), rb.data<float>(), c.data<float>());
    return;
  }
  Tensor a32 = widen(a), b32 = widen(b), c32 = widen(c);
  sgemm_batched(p, a32.data<float>(), b32.data<float>(), c32.data<float>());
  ops::cast(c32, c);
}

}  // namespace gridnn::kernels::cpu
