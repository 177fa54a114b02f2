// The MPI lifetime of a gridnn process (MPI builds only).
//
// One MpiSession in main() (best through MpiSession::run): MPI_Init_thread (multiple, so
// that a watchdog thread may end the job; every other call comes from main's thread),
// MPI_ERRORS_RETURN on the world communicator (failures throw, see mpi_check.h), the world
// rank recorded for error messages; MPI_Finalize on destruction. fail_job() ends the whole
// job from one rank. A session destroyed while an exception unwinds fails the job rather
// than finalizing, since the other ranks may be waiting for this one in a collective.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gridnn {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // This rank's position among the ranks of its node (MPI_COMM_TYPE_SHARED), and how many
  // share the node: `--device cuda` maps rank i of a node to GPU i modulo the node's GPUs.
  int node_rank() const { return node_rank_; }
  int node_size() const { return node_size_; }
  // The node of every world rank, numbered 0, 1, ... in the order of their lowest rank.
  // For tests without several machines, the test switch GRIDNN_TEST_NODE_OF_RANK
  // ("0,0,1,1": one entry per world rank, core/test_switches.h) replaces what MPI reports.
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }

  // Prints "gridnn: rank R failed: <why>" to stderr and aborts every rank of the job
  // (MPI_Abort), so one failing rank never leaves the others waiting.
  [[noreturn]] static void fail_job(const std::string& why, int exit_code = 1);

  // The shape of every gridnn main(): starts MPI, runs `body`, and turns an exception on
  // any rank into fail_job with its message (with a single process: "gridnn: error: ..."
  // on stderr and exit code 1, no MPI_Abort). An AllRanksError (core/error.h), which every
  // rank throws alike, is "gridnn: error: ..." from rank 0 and exit code 1 on every rank,
  // without MPI_Abort. Returns body's exit code.
  static int run(int* argc, char*** argv, const std::function<int(MpiSession&)>& body);

 private:
  int rank_ = 0;
  int size_ = 1;
  int node_rank_ = 0;
  int node_size_ = 1;
  std::vector<int> node_of_rank_;
  bool owns_init_ = false;
};

}  // namespace gridnn
