// Rank 1 throws; rank 0 waits in a barrier that rank 1 never reaches. Every way the
// exception can travel must end the whole job with a message naming rank 1:
//   (no flag)   MpiSession::run catches it and calls fail_job;
//   --escape    it unwinds past a plain MpiSession (caught further out), whose destructor
//               fails the job;
//   --uncaught  nobody catches it: the terminate handler fails the job.
// And --killed: rank 1 dies of SIGKILL (no exception, no message of its own) while rank 0
// waits in an all-reduce of the process grid's communicators (polite waiting); mpiexec
// must end the job and say which rank died of what.
#include <mpi.h>

#include <csignal>
#include <stdexcept>
#include <string>

#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--escape") {
    try {
      gridnn::MpiSession mpi(&argc, &argv);
      if (mpi.rank() == 1) throw std::runtime_error("injected failure");
      MPI_Barrier(MPI_COMM_WORLD);
    } catch (const std::exception&) {
      return 1;  // too late: the session is gone; its destructor must have ended the job
    }
    return 0;
  }
  if (mode == "--killed") {
    gridnn::MpiSession mpi(&argc, &argv);
    auto grid = gridnn::parallel::ProcessGrid::create({1, 1, mpi.size()});
    if (mpi.rank() == 1) std::raise(SIGKILL);
    gridnn::Tensor t = gridnn::Tensor::zeros({1024});
    grid->col().all_reduce(t);
    return 0;
  }
  if (mode == "--uncaught") {
    gridnn::MpiSession mpi(&argc, &argv);
    if (mpi.rank() == 1) throw std::runtime_error("injected failure");
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
  }
  return gridnn::MpiSession::run(&argc, &argv, [](gridnn::MpiSession& mpi) {
    if (mpi.rank() == 1) throw std::runtime_error("injected failure");
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
  });
}
