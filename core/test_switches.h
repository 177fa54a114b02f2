// Test switches: the environment variables by which a test changes what gridnn does, all read
// here, once, at the first call of test_switches() (docs/design.md §9, "Test switches").
// Production code consults the struct, never the environment, for them. Each is a seam for a
// case a test cannot reach otherwise: no GPU, one machine instead of several nodes, a disk that
// fills up in a whole job under mpiexec, a limit crossed mid-run.
//
// Operational variables are not test switches and stay where they act: GRIDNN_CPU_CONV
// (kernels/conv3d.h), GRIDNN_LOG_CUDNN (kernels/cuda/conv3d_cudnn.cpp), GRIDNN_CUDA_ALLOCATOR
// (core/cuda_allocator.cpp), GRIDNN_POLITE_WAIT and GRIDNN_SHARED_REDUCE
// (parallel/mpi_communicator.h), NCCL's and CUDA's (parallel/nccl_environment.h) and Slurm's
// (parallel/slurm.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gridnn {

struct TestSwitches {
  // GRIDNN_DEVICE_STANDIN=1: on a machine whose CUDA runtime reports no device (or a build
  // without CUDA), cuda:0 is the device stand-in (core/device.h). Set by CTest for every gpu
  // test executable (gpu_standin_<name>, test/CMakeLists.txt) and the op harness's backend
  // mode (ops_backend_standin, test/ops/CMakeLists.txt).
  bool device_standin = false;

  // GRIDNN_MEMORY_PREFLIGHT=off: the --memory-limit check before a job runs is skipped and
  // only the allocators' cap is set (models/run/memory_limit.h), so a job crosses the limit
  // mid-run, as a wrong prediction would. Used by test/tools/check_memory.py.
  bool memory_preflight = true;

  // GRIDNN_TEST_NODE_OF_RANK=0,0,1,1: the node of each world rank, in place of what MPI
  // reports (parallel/mpi_session.h), so one machine runs a job planned as on several nodes.
  // Used by test/tools/CMakeLists.txt's two-node runs (docs/cluster.md). The text as given
  // (empty: unset); nodes_of_ranks reads it once the job's size is known.
  std::optional<std::string> node_of_rank;

  // GRIDNN_TEST_DISK_FULL_AFTER=N: every file gridnn-train writes (core/file_io.h: checkpoints,
  // mostly) fails with ENOSPC once N of its bytes are written, as on a full device
  // (tools/gridnn_train.cpp). Used by test/tools/cluster_runs.sh's full-disk case. Read as
  // strtoll reads it; empty or negative: unset.
  std::optional<int64_t> disk_full_after;

  // GRIDNN_TEST_NCCL_LOOPBACK=1: ranks of one node that compute on the same GPU, which NCCL
  // refuses ("duplicate GPU") and which otherwise get the MPI backend, use NCCL anyway, each
  // as a host of its own talking over loopback sockets (parallel/nccl_loopback.h). For
  // correctness only, on a machine with one GPU: it shows nothing of NVLink, shared memory or
  // kernels of several communicators resident at once. Set by CTest for the *_nccl_loopback
  // tests (test/models/dist/CMakeLists.txt, test/parallel/CMakeLists.txt).
  bool nccl_loopback = false;

  // The node of each of `ranks` world ranks from node_of_rank (which must be set); throws
  // gridnn::Error unless it gives one number >= 0 per rank.
  std::vector<int> nodes_of_ranks(int ranks) const;
};

// This process's switches, read from its environment at the first call.
const TestSwitches& test_switches();
// The switches an environment gives (`getenv`: a variable's value, or null when unset).
TestSwitches read_test_switches(const std::function<const char*(const char*)>& getenv);

}  // namespace gridnn
