// Checking macros for CUDA runtime, cuBLAS and cuDNN calls (CUDA builds only; the cuDNN
// one only where cuDNN was found, GRIDNN_HAVE_CUDNN). A failed call throws CudaError /
// CublasError / CudnnError naming the call text, the library's own error string, the
// rank, file and line. NCCL's macro is in parallel/nccl_check.h, MPI's in
// parallel/mpi_check.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#if GRIDNN_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <string>

#include "core/error.h"

#define GRIDNN_CHECK_CUDA(CALL)                                                                                   \
  do {                                                                                                            \
    cudaError_t gridnn_status_ = (CALL);                                                                          \
    if (gridnn_status_ != cudaSuccess)                                                                            \
      throw ::gridnn::CudaError(                                                                                  \
          #CALL, std::string(cudaGetErrorName(gridnn_status_)) + " (" + cudaGetErrorString(gridnn_status_) + ")", \
          __FILE__, __LINE__);                                                                                    \
  } while (0)

// Checks the launch of the kernel just issued (bad configuration, no kernel image).
#define GRIDNN_CHECK_LAUNCH(NAME) GRIDNN_CHECK_CUDA((static_cast<void>(NAME), cudaGetLastError()))

#define GRIDNN_CHECK_CUBLAS(CALL)                                                                                \
  do {                                                                                                           \
    cublasStatus_t gridnn_status_ = (CALL);                                                                      \
    if (gridnn_status_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      throw ::gridnn::CublasError(                                                                               \
          #CALL,                                                                                                 \
          std::string(cublasGetStatusName(gridnn_status_)) + " (" + cublasGetStatusString(gridnn_status_) + ")", \
          __FILE__, __LINE__);                                                                                   \
  } while (0)

#if GRIDNN_HAVE_CUDNN
#define GRIDNN_CHECK_CUDNN(CALL)                                                                  \
  do {                                                                                            \
    cudnnStatus_t gridnn_status_ = (CALL);                                                        \
    if (gridnn_status_ != CUDNN_STATUS_SUCCESS)                                                   \
      throw ::gridnn::CudnnError(#CALL, cudnnGetErrorString(gridnn_status_), __FILE__, __LINE__); \
  } while (0)
#endif  // GRIDNN_HAVE_CUDNN
