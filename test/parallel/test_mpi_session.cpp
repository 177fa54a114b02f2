// MpiSession and the MPI checking macro, run under mpiexec with 1 and 2 ranks.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/mpi_check.h"
#include "parallel/mpi_session.h"

namespace gridnn {
namespace {

int g_rank = 0, g_size = 1;

TEST(MpiSession, RanksAgreeOnAnAllReduce) {
  int sum = 0;
  GRIDNN_CHECK_MPI(MPI_Allreduce(&g_rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  EXPECT_EQ(sum, g_size * (g_size - 1) / 2);
  EXPECT_EQ(error_rank(), g_rank);
}

TEST(MpiSession, AFailedCallThrowsMpiErrorNamingCallAndRank) {
  int value = 1, out = 0;
  try {
    // MPI_COMM_NULL is an invalid communicator: with MPI_ERRORS_RETURN this returns an error.
    GRIDNN_CHECK_MPI(MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_NULL));
    FAIL() << "MPI_Allreduce on MPI_COMM_NULL succeeded";
  } catch (const MpiError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("MPI_Allreduce"), std::string::npos) << m;
    EXPECT_NE(m.find("on rank " + std::to_string(g_rank)), std::string::npos) << m;
    EXPECT_NE(m.find("test_mpi_session.cpp"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace gridnn

int main(int argc, char** argv) {
  gridnn::MpiSession mpi(&argc, &argv);
  gridnn::g_rank = mpi.rank();
  gridnn::g_size = mpi.size();
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {  // one report is enough
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any_failed;
}
