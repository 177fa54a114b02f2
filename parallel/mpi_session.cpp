#include "parallel/mpi_session.h"

#include <cstdio>
#include <cstdlib>

#include "parallel/mpi_check.h"

namespace gridnn {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  GRIDNN_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    GRIDNN_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    owns_init_ = true;
  }
  GRIDNN_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  GRIDNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  GRIDNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  set_error_rank(rank_);
}

MpiSession::~MpiSession() {
  if (owns_init_) MPI_Finalize();
}

void MpiSession::fail_job(const std::string& why, int exit_code) {
  int rank = error_rank();
  std::fprintf(stderr, "gridnn: rank %d failed: %s\n", rank, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort should not return
}

}  // namespace gridnn
