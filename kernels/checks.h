// Argument checks shared by the op entry points. Each throws gridnn::Error naming the op
// and the offending tensors, so a wrong call says what to change.
#pragma once

#include "core/tensor.h"

namespace gridnn::kernels {

void expect_defined(const char* op, const char* name, const Tensor& t);
void expect_same_device(const char* op, const Tensor& a, const Tensor& b);
void expect_same_shape(const char* op, const Tensor& a, const Tensor& b);
void expect_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void expect_floating(const char* op, const Tensor& t);
// All of the above for an element-wise op over same-shaped tensors.
void expect_elementwise(const char* op, const Tensor& a, const Tensor& b);
// `out` may be exactly an input (in place) but must not partly overlap it.
void expect_no_partial_overlap(const char* op, const Tensor& in, const Tensor& out);
// `out` must not share memory with `in` at all (GEMM, reductions).
void expect_disjoint(const char* op, const Tensor& in, const Tensor& out);

[[noreturn]] void throw_no_cuda(const char* op);

}  // namespace gridnn::kernels

// Calls cpu::FN(...) or cuda::FN(...) by device; without CUDA support a CUDA tensor is a
// clear error rather than a link failure. A device whose ops run on the host (the CPU and the
// device stand-in, core/device.h) runs the CPU's body.
#if GRIDNN_HAVE_CUDA
#define GRIDNN_BACKEND_CALL(DEVICE, FN, ...) \
  ((DEVICE).runs_on_host() ? ::gridnn::kernels::cpu::FN(__VA_ARGS__) : ::gridnn::kernels::cuda::FN(__VA_ARGS__))
#else
#define GRIDNN_BACKEND_CALL(DEVICE, FN, ...) \
  ((DEVICE).runs_on_host() ? ::gridnn::kernels::cpu::FN(__VA_ARGS__) : ::gridnn::kernels::throw_no_cuda(#FN))
#endif
