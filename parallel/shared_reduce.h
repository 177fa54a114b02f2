// The all-reduce of an MPI communicator whose ranks all run on one node (docs/design.md §4),
// through an MPI-3 shared-memory window instead of messages (MPI builds only).
//
// Each rank owns two slots of the window. A call runs in chunks of at most one slot,
// alternating the slots from chunk to chunk (and from call to call):
//   1. each rank copies its chunk into its slot;                                  barrier
//   2. rank r combines block r of the chunk (balanced_range over the ranks) of every rank's
//      slot, in rank order (detail::combine, the MPI backend's fixed order), into its own
//      data and into block r of its slot;                                          barrier
//   3. each rank copies every other rank's block from that rank's slot.
// No barrier ends a chunk: the next one writes the other slot, and the one after that
// writes this slot again only after the barrier of step 1 in between, which a rank passes
// only once it has finished reading. Results are bitwise those of the message path (each
// element combined in rank order either way). On 2 ranks it moves the data through memory
// about 5.5 times a rank, against about 7.5 for the all-to-all and all-gather through
// MPICH's shared-memory cells, and needs no message progress: the copies run at memory speed,
// not at the pace of the cells' handshakes between two busy processes.
// The window is MPI's memory, outside gridnn's allocators (as MPI's own buffers are): two
// slots of kSlotBytes a rank, and a communicator makes two windows (its blocking and its
// started all-reduces').
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace gridnn::parallel {

class SharedReduce {
 public:
  static constexpr int64_t kSlotBytes = int64_t(1) << 20;

  // Collective over `comm`: a window of two slots of `slot_bytes` a rank on a duplicate of
  // comm, or null when comm has one rank, its ranks do not all share this node, or a rank
  // does not want it (`wanted` false there).
  static std::unique_ptr<SharedReduce> make(MPI_Comm comm, bool wanted, int64_t slot_bytes = kSlotBytes);
  // Frees the window and the duplicate (collective), unless MPI is finalized or an exception
  // unwinds: a rank that fails then ends the job rather than wait for the others here.
  ~SharedReduce();
  SharedReduce(const SharedReduce&) = delete;
  SharedReduce& operator=(const SharedReduce&) = delete;

  // data[0, count) = the combination over the ranks, in rank order, of their data. Every
  // rank calls it with the same count, dtype and op. `barrier` returns once every rank of the
  // communicator has called it (the communicator's watched wait).
  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, const std::function<void()>& barrier);

  // The duplicate of the communicator the barriers belong on: their order then never meets
  // the order of the communicator's other collectives.
  MPI_Comm comm() const { return comm_; }

 private:
  SharedReduce(MPI_Comm comm, MPI_Win win, std::vector<char*> bases, int rank, int64_t slot_bytes);
  // Every rank's stores to the window before it are seen by every rank's loads after it.
  void sync(const std::function<void()>& barrier);

  MPI_Comm comm_;
  MPI_Win win_;
  std::vector<char*> bases_;  // each rank's two slots, back to back
  int rank_;
  int64_t slot_bytes_;
  int next_slot_ = 0;  // 0 or 1: the slot the next chunk writes
};

}  // namespace gridnn::parallel
