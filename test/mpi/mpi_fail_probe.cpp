// Rank 1 throws; rank 0 waits in a barrier that rank 1 never reaches. The top-level
// handler must turn the exception into MpiSession::fail_job, which aborts every rank.
#include <mpi.h>

#include <stdexcept>

#include "parallel/mpi_session.h"

int main(int argc, char** argv) {
  gridnn::MpiSession mpi(&argc, &argv);
  try {
    if (mpi.rank() == 1) throw std::runtime_error("injected failure");
    MPI_Barrier(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    gridnn::MpiSession::fail_job(e.what());
  }
  return 0;
}
