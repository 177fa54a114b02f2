// Per-device CUDA state (CUDA builds only): the compute stream every kernel of that
// device is queued on, and the cuBLAS handle bound to it. Created on first use, kept
// for the life of the process.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace gridnn::cuda {

struct DeviceContext {
  int device = 0;
  cudaStream_t stream = nullptr;  // compute stream (non-blocking w.r.t. the legacy stream)
  cublasHandle_t cublas = nullptr;
  cudaDeviceProp properties{};
};

// Makes `device` current on this thread and returns its context.
DeviceContext& context(int device);
// Waits for all work queued on the device's compute stream.
void synchronize(int device);

}  // namespace gridnn::cuda
