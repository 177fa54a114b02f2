// Error types: user errors say what to change; backend errors name the call, rank, file, line.
#include <gtest/gtest.h>

#include "core/device.h"
#include "core/error.h"

namespace gridnn {
namespace {

TEST(Errors, BackendErrorNamesCallRankFileAndLine) {
  set_error_rank(3);
  MpiError e("MPI_Allreduce(buf, ...)", "MPI_ERR_COMM: invalid communicator", "grid.cpp", 42);
  set_error_rank(-1);
  std::string m = e.what();
  EXPECT_NE(m.find("MPI call failed on rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find("MPI_Allreduce(buf, ...)"), std::string::npos) << m;
  EXPECT_NE(m.find("invalid communicator"), std::string::npos) << m;
  EXPECT_NE(m.find("grid.cpp:42"), std::string::npos) << m;
  EXPECT_EQ(e.rank(), 3);
  const Error& as_base = e;  // every backend error is also a gridnn::Error
  EXPECT_EQ(std::string(as_base.what()), m);
}

TEST(Errors, WithoutMpiTheRankIsOmitted) {
  CudaError e("cudaMalloc(&p, n)", "cudaErrorMemoryAllocation (out of memory)", "alloc.cpp", 7);
  EXPECT_EQ(std::string(e.what()).find("rank"), std::string::npos) << e.what();
}

TEST(Errors, RequireStreamsTheMessage) {
  try {
    GRIDNN_REQUIRE(1 + 1 == 3, "expected ", 3, " got ", 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "expected 3 got 2");
  }
}

TEST(Devices, ParseAndRequire) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
  EXPECT_THROW(Device::parse("cuda:"), Error);
  EXPECT_NO_THROW(require_device(Device::cpu()));
  if (cuda_device_count() == 0) {
    try {
      require_device(Device::cuda(0));
      FAIL() << "cuda:0 accepted without a device";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gridnn
