// The checking macros of the CUDA runtime, cuBLAS, cuDNN and NCCL (docs/design.md §2): a failed
// status throws the library's error type naming the call text, the library's own error
// name, the file and the line; a success status does not throw. No GPU is needed: the
// statuses are planted, and cudaGetErrorName, cublasGetStatusName/String,
// cudnnGetErrorString and ncclGetErrorString work without a device.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/device.h"
#endif
#if GRIDNN_HAVE_NCCL
#include "parallel/nccl_check.h"
#endif

namespace gridnn {
namespace {

#if GRIDNN_HAVE_CUDA

// Runs `body`, which must throw E; returns its what() (empty, with a test failure, if not).
template <class E, class F>
std::string what_thrown(F&& body) {
  try {
    body();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// The message names the library, the call text, the library's error text and file:line.
void expect_names(const std::string& what, const char* library, const std::string& call, const std::string& detail,
                  int line) {
  const std::string where = std::string(__FILE__) + ":" + std::to_string(line);
  EXPECT_NE(what.find(std::string(library) + " call failed"), std::string::npos) << what;
  EXPECT_NE(what.find(call), std::string::npos) << what;
  EXPECT_NE(what.find(detail), std::string::npos) << what;
  EXPECT_NE(what.find(where), std::string::npos) << what << "\n  expected " << where;
}

TEST(BackendChecks, CudaFailureNamesCallErrorFileAndLine) {
  int line = 0;
  const std::string what = what_thrown<CudaError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_CUDA(cudaErrorInvalidValue);
  });
  expect_names(what, "CUDA", "cudaErrorInvalidValue", "cudaErrorInvalidValue", line);
  // The detail comes from the status, not the call text: both the name and the description.
  const cudaError_t planted = cudaErrorInvalidValue;
  const std::string from_variable = what_thrown<CudaError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_CUDA(planted);
  });
  expect_names(from_variable, "CUDA", "planted", "cudaErrorInvalidValue", line);
  EXPECT_NE(from_variable.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << from_variable;
}

TEST(BackendChecks, CudaErrorCarriesTheCallAndIsAGridnnError) {
  try {
    GRIDNN_CHECK_CUDA(cudaErrorMemoryAllocation);
    FAIL() << "did not throw";
  } catch (const BackendError& e) {
    EXPECT_EQ(e.call(), "cudaErrorMemoryAllocation");
    EXPECT_EQ(e.rank(), error_rank());
    EXPECT_NE(dynamic_cast<const CudaError*>(&e), nullptr);
    const Error& as_user_error_base = e;
    EXPECT_NE(std::string(as_user_error_base.what()).find("cudaErrorMemoryAllocation"), std::string::npos);
  }
}

TEST(BackendChecks, CallIsEvaluatedOnce) {
  int calls = 0;
  auto failing = [&] {
    ++calls;
    return cudaErrorInvalidValue;
  };
  EXPECT_THROW(GRIDNN_CHECK_CUDA(failing()), CudaError);
  EXPECT_EQ(calls, 1);
  auto succeeding = [&] {
    ++calls;
    return CUBLAS_STATUS_SUCCESS;
  };
  EXPECT_NO_THROW(GRIDNN_CHECK_CUBLAS(succeeding()));
  EXPECT_EQ(calls, 2);
}

TEST(BackendChecks, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(GRIDNN_CHECK_CUDA(cudaSuccess));
  EXPECT_NO_THROW(GRIDNN_CHECK_CUBLAS(CUBLAS_STATUS_SUCCESS));
#if GRIDNN_HAVE_CUDNN
  EXPECT_NO_THROW(GRIDNN_CHECK_CUDNN(CUDNN_STATUS_SUCCESS));
#endif
#if GRIDNN_HAVE_NCCL
  EXPECT_NO_THROW(GRIDNN_CHECK_NCCL(ncclSuccess));
#endif
}

TEST(BackendChecks, LaunchCheckReportsTheLastErrorAndTheKernelName) {
  // Plant an error in the runtime's last-error slot: cudaSetDevice(-1) fails with
  // cudaErrorInvalidDevice on a GPU machine, and with the initialization error (e.g.
  // cudaErrorInsufficientDriver, docs/design.md §11) where there is no usable GPU.
  const cudaError_t planted = cudaSetDevice(-1);
  ASSERT_NE(planted, cudaSuccess);
  int line = 0;
  const std::string what = what_thrown<CudaError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_LAUNCH("my_kernel");
  });
  expect_names(what, "CUDA", "\"my_kernel\"", cudaGetErrorName(planted), line);
  EXPECT_NE(what.find("cudaGetLastError()"), std::string::npos) << what;
  // cudaGetLastError reset the slot, so the next check passes. (Without a usable GPU the
  // runtime reports its initialization error on every call, so only check with one.)
  if (cuda_device_count() > 0) {
    EXPECT_NO_THROW(GRIDNN_CHECK_LAUNCH("my_kernel"));
  }
}

TEST(BackendChecks, CublasFailureNamesCallStatusFileAndLine) {
  int line = 0;
  const std::string what = what_thrown<CublasError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_CUBLAS(CUBLAS_STATUS_INVALID_VALUE);
  });
  expect_names(what, "cuBLAS", "CUBLAS_STATUS_INVALID_VALUE", cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), line);
  const cublasStatus_t planted = CUBLAS_STATUS_INVALID_VALUE;
  const std::string from_variable = what_thrown<CublasError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_CUBLAS(planted);
  });
  expect_names(from_variable, "cuBLAS", "planted", "CUBLAS_STATUS_INVALID_VALUE", line);
}

TEST(BackendChecks, CudnnFailureNamesCallStatusFileAndLine) {
#if GRIDNN_HAVE_CUDNN
  int line = 0;
  const std::string what = what_thrown<CudnnError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_CUDNN(CUDNN_STATUS_BAD_PARAM);
  });
  expect_names(what, "cuDNN", "CUDNN_STATUS_BAD_PARAM", cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), line);
  const cudnnStatus_t planted = CUDNN_STATUS_BAD_PARAM;
  const std::string from_variable = what_thrown<CudnnError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_CUDNN(planted);
  });
  expect_names(from_variable, "cuDNN", "planted", "CUDNN_STATUS_BAD_PARAM", line);
#else
  GTEST_SKIP() << "gridnn was built without cuDNN (GRIDNN_HAVE_CUDNN=0: not found at configure)";
#endif
}

TEST(BackendChecks, NcclFailureNamesCallStatusFileAndLine) {
#if GRIDNN_HAVE_NCCL
  int line = 0;
  const std::string what = what_thrown<NcclError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_NCCL(ncclInvalidArgument);
  });
  expect_names(what, "NCCL", "ncclInvalidArgument", ncclGetErrorString(ncclInvalidArgument), line);
  const ncclResult_t planted = ncclInvalidArgument;
  const std::string from_variable = what_thrown<NcclError>([&] {
    line = __LINE__ + 1;  // the check below
    GRIDNN_CHECK_NCCL(planted);
  });
  expect_names(from_variable, "NCCL", "planted", ncclGetErrorString(ncclInvalidArgument), line);
#else
  GTEST_SKIP() << "gridnn was built without NCCL (needs -DGRIDNN_CUDA=ON, -DGRIDNN_MPI=ON and "
                  "NCCL 2 found at configure)";
#endif
}

#else  // !GRIDNN_HAVE_CUDA

TEST(BackendChecks, NeedCuda) {
  GTEST_SKIP() << "CUDA is off in this build (-DGRIDNN_CUDA=OFF): the CUDA, cuBLAS, cuDNN and "
                  "NCCL checking macros are not compiled";
}

#endif  // GRIDNN_HAVE_CUDA

}  // namespace
}  // namespace gridnn
