// main() of the MPI test binaries (label mpi): MPI through MpiSession, GoogleTest's full
// report from rank 0, only the failures (with the rank) from the others, and one exit
// status for all: 1 when any rank failed; kAllSkipped (77, the CTest tests'
// SKIP_RETURN_CODE, test/CMakeLists.txt) when no rank failed and every test that ran on
// every rank skipped (GTEST_SKIP: a gpu test without a device), so CTest reports "Skipped"
// and not "Passed"; else 0. Tests reach the world through test::world_rank() / world_size().
#include "test/support/mpi_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "parallel/mpi_check.h"
#include "parallel/mpi_session.h"

namespace gridnn::test {
namespace {

int g_rank = 0, g_size = 1;
constexpr int kAllSkipped = 77;

// The failures of a rank other than 0, each with its rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", g_rank, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", g_rank, info.test_suite_name(), info.name());
  }
};

}  // namespace

int world_rank() { return g_rank; }
int world_size() { return g_size; }

TempDir shared_temp_dir(const std::string& what) {
  // Rank 0 sends the path's length first; 0 when it could not make the folder.
  std::optional<TempDir> made;
  std::string path;
  std::string failure;
  if (g_rank == 0) {
    try {
      made.emplace(what);
      path = made->path().string();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  int length = int(path.size());
  GRIDNN_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (length == 0) throw std::runtime_error("shared_temp_dir: rank 0 has no folder: " + failure);
  path.resize(size_t(length));
  GRIDNN_CHECK_MPI(MPI_Bcast(path.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD));
  return made ? std::move(*made) : TempDir::borrowed(path);
}

}  // namespace gridnn::test

int main(int argc, char** argv) {
  gridnn::MpiSession mpi(&argc, &argv);
  gridnn::test::g_rank = mpi.rank();
  gridnn::test::g_size = mpi.size();
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new gridnn::test::FailurePrinter);
  }
  int failed = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  int all_skipped = unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count();
  int any_failed = 0, everywhere_skipped = 0;
  GRIDNN_CHECK_MPI(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  GRIDNN_CHECK_MPI(MPI_Allreduce(&all_skipped, &everywhere_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (any_failed) return 1;
  return everywhere_skipped ? gridnn::test::kAllSkipped : 0;
}
