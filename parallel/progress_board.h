// Never hang: a time limit on every blocking wait of a communicator, and a progress board
// that says, when the limit strikes, which ranks had not arrived.
//
// Each rank keeps a small record in memory shared by the ranks of its node
// (MPI_Win_allocate_shared): the training step it is in, how many collectives it has started
// on each communicator, and the collective it is waiting in, if any. A communicator gets the
// same slot on every member (agreed when it is made), so collective number n on slot k is
// the same call on every rank. When a wait outlasts the limit (gridnn-train --comm-timeout,
// default 300 s), the waiting rank reads its peers' records — a stopped or dead peer cannot
// answer a message, but its record stays readable — and ends the job (MPI_Abort) with one
// message: the operation, communicator, layer and step it waited in, and for every peer
// whether it had arrived, or is stopped or dead (the kernel's view of its process). Peers on
// other nodes are not on this node's board; the message
// says so, and their own node's ranks report them.
//
// The records cost two atomic stores per wait and one per collective; nothing is sent.
// NCCL operations on device tensors are watched by a thread instead (nccl_watchdog.h):
// one still under way after the limit is aborted and ends the job with the same kind of
// message, without the peers' state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#if GRIDNN_HAVE_MPI
#include <mpi.h>
#endif

namespace gridnn::parallel {

constexpr double kDefaultCommTimeout = 300;
// The exit status of a job ended by the time limit (as timeout(1)'s).
constexpr int kCommTimeoutExitCode = 124;

// Seconds one blocking communicator call may wait (>= 0; 0: no limit). Process-wide.
void set_comm_timeout(double seconds);
double comm_timeout();
// The training step this rank works on (shown in a timeout's message, its own and its peers').
void set_progress_step(int64_t step);
int64_t progress_step();

#if GRIDNN_HAVE_MPI

// Collective over `node` (the ranks of this node, MPI_COMM_TYPE_SHARED): MpiSession makes the
// board at start and frees it at the end. Without a board, timeouts still end the job; the
// message then lacks the peers' state.
void open_progress_board(MPI_Comm node);
void close_progress_board();
// A world barrier under the time limit: MpiSession's last collective, so that freeing the
// board and MPI_Finalize (which wait for every rank) never wait for a dead one.
void finish_barrier();

// A communicator's place on the board: its slot (-1: untracked, when there are more
// communicators than slots) and its members' world ranks, in communicator rank order.
struct BoardSlot {
  int slot = -1;
  std::vector<int> world_ranks;
};
// Collective over `comm`: agrees on a slot every member shares.
BoardSlot join_progress_board(MPI_Comm comm);

// One blocking wait of a communicator call, watched: construct it when the call starts its
// collective (`collective`: true; it counts as the next collective on the slot) or its
// point-to-point transfer (false; `partners`: the communicator ranks it exchanges with),
// then call expired() while polling. Once the limit has passed, expired() ends the job with
// the message above and does not return.
class WatchedWait {
 public:
  WatchedWait(const BoardSlot& slot, std::string comm_name, const char* op, bool collective,
              std::vector<int> partners = {});
  ~WatchedWait();
  WatchedWait(const WatchedWait&) = delete;
  WatchedWait& operator=(const WatchedWait&) = delete;

  // Marks this rank as waiting now (it is not, between the start and the first wait).
  void begin();
  // False while within the limit (it reads the clock every 64 calls); past it, ends the
  // job and does not return.
  bool expired();

 private:
  [[noreturn]] void fail(double waited) const;

  const BoardSlot& slot_;
  std::string comm_name_;
  const char* op_;
  bool collective_;
  std::vector<int> partners_;
  int64_t call_ = 0;  // this collective's number on the slot (1, 2, ...)
  std::string layer_;
  double start_ = -1;  // seconds (steady clock) when the wait began; -1: not yet
  unsigned polls_ = 0;
};

#endif

}  // namespace gridnn::parallel
