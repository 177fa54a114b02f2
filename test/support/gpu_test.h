// Shared pieces of the gpu tests: a fixture that skips without a CUDA device (also in a
// build without CUDA, so these tests always build and show as skipped, never as passed),
// the device under test, and per-dtype tolerances for comparing against the CPU backend.
//
// Every gpu test also runs on the device stand-in (core/device.h; CTest's gpu_standin_*
// tests), which has host memory and the CPU's ops but the device's contracts. A test of what
// only a real GPU has starts with GRIDNN_NEEDS_REAL_GPU("what"), which skips it there.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>

#include "core/device.h"
#include "core/tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn::test {

inline Device gpu() { return Device::cuda(0); }

// The first statement of a test of what only a real GPU has (the caching allocator, CUDA
// streams and events, cuBLAS and NCCL): skipped on the device stand-in.
#define GRIDNN_NEEDS_REAL_GPU(WHAT)                                               \
  do {                                                                            \
    if (::gridnn::test::gpu().is_standin())                                       \
      GTEST_SKIP() << "needs a real GPU (" WHAT "); this is the device stand-in"; \
  } while (0)
inline Tensor on_gpu(const Tensor& t) { return t.to(gpu()); }

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device: "
                   << (built_with_cuda() ? "the CUDA runtime reports none (no GPU, or no usable driver)"
                                         : "gridnn was built without CUDA (-DGRIDNN_CUDA=OFF)");
    // Create the device context (stream, cuBLAS handle and its workspace) before any test
    // measures allocator statistics.
    synchronize(gpu());
  }
};

// `f32` for f32 results; for 16-bit results, room for one unit in the last place of the
// result's format (the two backends may round a float that differs in its last bits to
// neighbouring 16-bit values).
inline Tolerance tolerance_for(DType t, Tolerance f32) {
  switch (t) {
    case DType::f16:
      return {std::max(f32.atol, 2e-3), std::max(f32.rtol, 2e-3)};
    case DType::bf16:
      return {std::max(f32.atol, 1e-2), std::max(f32.rtol, 1e-2)};
    default:
      return f32;
  }
}

constexpr DType kFloatingTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr DType kAllTypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};

}  // namespace gridnn::test
