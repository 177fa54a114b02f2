// Rank 1 throws; rank 0 waits in a barrier that rank 1 never reaches. Every way the
// exception can travel must end the whole job with a message naming rank 1:
//   (no flag)   MpiSession::run catches it and calls fail_job;
//   --escape    it unwinds past a plain MpiSession (caught further out), whose destructor
//               fails the job;
//   --uncaught  nobody catches it: the terminate handler fails the job.
// And --killed: rank 1 dies of SIGKILL (no exception, no message of its own) while rank 0
// waits in an all-reduce of the process grid's communicators (polite waiting); mpiexec
// must end the job and say which rank died of what.
// And --nccl-stall: both ranks on one GPU with NCCL between them (the test switch
// GRIDNN_TEST_NCCL_LOOPBACK=1, parallel/nccl_loopback.h); rank 1 stalls past the time limit
// before an all-reduce that rank 0 has begun: the NCCL watchdog (parallel/nccl_watchdog.h)
// must end the job naming the operation. Exit status 77 (skipped) without a GPU or NCCL.
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/device.h"
#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"
#include "parallel/progress_board.h"

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
  if (mode == "--nccl-stall") {
    gridnn::MpiSession mpi(&argc, &argv);
    if (!GRIDNN_HAVE_NCCL || gridnn::cuda_device_count() == 0 || gridnn::Device::cuda(0).is_standin()) {
      if (mpi.rank() == 0) std::printf("skipped: needs a CUDA device and an NCCL build\n");
      return 77;
    }
    gridnn::parallel::set_comm_timeout(5);
    auto grid = gridnn::parallel::ProcessGrid::create({1, 1, mpi.size()}, gridnn::parallel::CommBackend::automatic,
                                                      gridnn::Device::cuda(0));
    if (grid->backend() != gridnn::parallel::CommBackend::nccl) {
      std::fprintf(stderr, "--nccl-stall: the grid's backend is not NCCL (set GRIDNN_TEST_NCCL_LOOPBACK=1)\n");
      return 2;
    }
    if (mpi.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
    gridnn::Tensor t = gridnn::Tensor::zeros({1024}, gridnn::DType::f32, gridnn::Device::cuda(0));
    grid->col().all_reduce(t);
    t.to_host();  // waits for it: the watchdog must end the job first
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
