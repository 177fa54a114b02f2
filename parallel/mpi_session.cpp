#include "parallel/mpi_session.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <thread>

#include "core/test_switches.h"
#include "parallel/mpi_check.h"
#include "parallel/progress_board.h"

namespace gridnn {

namespace {
// The thread that initialized MPI, and the thread support MPI provides: fail_job on another
// thread may call MPI_Abort only with MPI_THREAD_MULTIPLE.
std::thread::id g_mpi_thread;
int g_thread_level = MPI_THREAD_SINGLE;

// std::terminate (an exception nobody catches, a throw from a noexcept function) on one
// rank must still end the whole job, naming the exception when there is one.
[[noreturn]] void terminate_job() {
  std::string why = "std::terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      why = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      why = "uncaught exception of unknown type";
    }
  }
  MpiSession::fail_job(why);
}
// The node of every world rank (see node_of_rank()); `node`: this rank's node communicator.
std::vector<int> nodes_of_ranks(MPI_Comm node, int rank, int size) {
  if (test_switches().node_of_rank) return test_switches().nodes_of_ranks(size);  // a test's (core/test_switches.h)
  std::vector<int> nodes(static_cast<size_t>(size));
  int leader = rank;  // the node's lowest world rank names it
  GRIDNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node));
  std::vector<int> leaders(static_cast<size_t>(size));
  GRIDNN_CHECK_MPI(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::map<int, int> number;
  for (size_t w = 0; w < leaders.size(); ++w) {
    auto it = number.emplace(leaders[w], int(number.size())).first;
    nodes[w] = it->second;
  }
  return nodes;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  GRIDNN_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    // MPI_THREAD_MULTIPLE, so that the NCCL watchdog's thread may end the job (fail_job):
    // every other MPI call is made by this thread.
    int provided = 0;
    GRIDNN_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_init_ = true;
  }
  GRIDNN_CHECK_MPI(MPI_Query_thread(&g_thread_level));
  g_mpi_thread = std::this_thread::get_id();
  GRIDNN_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  GRIDNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  GRIDNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  GRIDNN_CHECK_MPI(MPI_Comm_rank(node, &node_rank_));
  GRIDNN_CHECK_MPI(MPI_Comm_size(node, &node_size_));
  node_of_rank_ = nodes_of_ranks(node, rank_, size_);
  parallel::open_progress_board(node);
  GRIDNN_CHECK_MPI(MPI_Comm_free(&node));
  set_error_rank(rank_);
  std::set_terminate(terminate_job);
}

MpiSession::~MpiSession() {
  if (std::uncaught_exceptions() > 0)
    fail_job("an exception is unwinding past the MPI session (catch it and call fail_job to report its message)");
  parallel::finish_barrier();
  parallel::close_progress_board();
  if (owns_init_) MPI_Finalize();
}

int MpiSession::run(int* argc, char*** argv, const std::function<int(MpiSession&)>& body) {
  MpiSession session(argc, argv);
  try {
    return body(session);
  } catch (const AllRanksError& e) {
    // Every rank has it: one message, status 1 everywhere, and the session ends normally.
    if (session.rank() == 0) std::fprintf(stderr, "gridnn: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // Alone there is nobody to abort: report, finalize and exit 1 like any program.
    if (session.size() == 1) {
      std::fprintf(stderr, "gridnn: error: %s\n", e.what());
      return 1;
    }
    fail_job(e.what());
  } catch (...) {
    fail_job("unknown exception");
  }
}

void MpiSession::fail_job(const std::string& why, int exit_code) {
  int rank = error_rank();
  std::fprintf(stderr, "gridnn: rank %d failed: %s\n", rank, why.c_str());
  std::fflush(stderr);
  // mpiexec forwards each rank's stderr asynchronously; aborting at once sometimes killed
  // the forwarder before the message got out (seen 2 in 30 runs with MPICH 4.0). A short
  // pause lets it through; the job still ends within a second.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  // Another thread (the NCCL watchdog) without MPI_THREAD_MULTIPLE must not call MPI: it
  // exits, and the launcher ends the job when a rank exits without MPI_Finalize (mpiexec and
  // srun --kill-on-bad-exit do; docs/cluster.md).
  if (g_thread_level != MPI_THREAD_MULTIPLE && std::this_thread::get_id() != g_mpi_thread) std::_Exit(exit_code);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort should not return
}

}  // namespace gridnn
