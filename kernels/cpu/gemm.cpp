// CPU backend of kernels/gemm.h: an fp32 sgemm per batch entry, oneDNN's (dnnl_sgemm) when
// gridnn is built with oneDNN, else OpenBLAS's cblas_sgemm. oneDNN picks its kernel by the
// CPU's instruction sets at run time; OpenBLAS 0.3.21 (Debian 12) picks by CPU model and
// falls back to its SSE3 kernel on models it does not know (on an Intel Xeon with AVX-512,
// model 207: 30 against oneDNN's 150 GFLOP/s on one thread, bench/RESULTS.md). f16/bf16
// operands are widened to f32, multiplied, and narrowed back (f32 accumulation as on the GPU).
// tf32 and bf16 math on f32 operands is emulated: A and B rounded into scratch copies,
// then the same fp32 sgemm (kernels/math_mode.h).
#include "kernels/gemm.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#if GRIDNN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif

#include "kernels/cpu/parallel_for.h"
#include "kernels/elementwise.h"

#if !GRIDNN_HAVE_ONEDNN
// OpenBLAS's own queries, weak so that another BLAS links too (they are then null).
// NOLINTBEGIN(readability-redundant-declaration): cblas.h declares them, not weak
extern "C" int openblas_get_parallel(void) __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
// NOLINTEND(readability-redundant-declaration)
#endif

namespace gridnn::kernels::cpu {
namespace {

#if !GRIDNN_HAVE_ONEDNN
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
#endif

void sgemm_batched(const GemmProblem& p, const float* a, const float* b, float* c) {
  for (int64_t i = 0; i < p.batch; ++i) {
    float* ci = c + i * p.stride_c;
    if (p.k == 0) {  // BLAS may skip the beta scaling when k == 0; do it explicitly
      for (int64_t j = 0; j < p.m * p.n; ++j) ci[j] = p.beta == 0.0f ? 0.0f : p.beta * ci[j];
      continue;
    }
    sgemm(p, a + i * p.stride_a, b + i * p.stride_b, ci);
  }
}

Tensor widen(const Tensor& t) { return t.dtype() == DType::f32 ? t : ops::cast(t, DType::f32); }

}  // namespace

void sgemm(const GemmProblem& p, const float* a, const float* b, float* c) {
#if GRIDNN_HAVE_ONEDNN
  const dnnl_status_t status = dnnl_sgemm(p.transpose_a ? 'T' : 'N', p.transpose_b ? 'T' : 'N', p.m, p.n, p.k, p.alpha,
                                          a, p.lda, b, p.ldb, p.beta, c, p.ldc);
  if (status != dnnl_success)
    throw Error("gemm (oneDNN sgemm): status " + std::to_string(int(status)) + " for m " + std::to_string(p.m) +
                ", n " + std::to_string(p.n) + ", k " + std::to_string(p.k));
#else
  keep_one_thread_pool();
  cblas_sgemm(CblasRowMajor, p.transpose_a ? CblasTrans : CblasNoTrans, p.transpose_b ? CblasTrans : CblasNoTrans,
              int(p.m), int(p.n), int(p.k), p.alpha, a, int(p.lda), b, int(p.ldb), p.beta, c, int(p.ldc));
#endif
}

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
