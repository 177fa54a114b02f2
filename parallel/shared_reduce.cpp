// The shared-window all-reduce (see shared_reduce.h for the why).
#include "parallel/shared_reduce.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "parallel/comm_detail.h"
#include "parallel/mpi_check.h"
#include "parallel/process_grid.h"

namespace gridnn::parallel {

std::unique_ptr<SharedReduce> SharedReduce::make(MPI_Comm comm, bool wanted, int64_t slot_bytes) {
  GRIDNN_REQUIRE(slot_bytes > 0 && slot_bytes % 8 == 0,
                 "SharedReduce: slot_bytes must be a positive multiple of 8, got ", slot_bytes);
  int size = 1, rank = 0;
  GRIDNN_CHECK_MPI(MPI_Comm_size(comm, &size));
  GRIDNN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  if (size == 1) return nullptr;
  MPI_Comm dup = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_dup(comm, &dup));
  GRIDNN_CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  MPI_Comm node = MPI_COMM_NULL;
  // Key 0 keeps comm's order, so rank r of comm owns segment r of the window.
  GRIDNN_CHECK_MPI(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = 1;
  GRIDNN_CHECK_MPI(MPI_Comm_size(node, &node_size));
  int use = wanted && node_size == size ? 1 : 0;  // all or nothing: every rank must agree
  GRIDNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &use, 1, MPI_INT, MPI_MIN, dup));
  MPI_Win win = MPI_WIN_NULL;
  void* mine = nullptr;
  if (use) {
    // Shared memory can run out (a container's small /dev/shm): then every rank goes on by
    // messages. A window some ranks made is left to the job's end: freeing it would wait for
    // the ranks that have none.
    int made = MPI_Win_allocate_shared(MPI_Aint(2 * slot_bytes), 1, MPI_INFO_NULL, node, &mine, &win) == MPI_SUCCESS;
    GRIDNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &made, 1, MPI_INT, MPI_MIN, dup));
    use = made;
  }
  MPI_Comm_free(&node);  // the window keeps its own reference to the group
  if (!use) {
    MPI_Comm_free(&dup);
    return nullptr;
  }
  GRIDNN_CHECK_MPI(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  std::vector<char*> bases(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    GRIDNN_CHECK_MPI(MPI_Win_shared_query(win, r, &bytes, &unit, &base));
    bases[size_t(r)] = static_cast<char*>(base);
  }
  // One passive epoch for the window's life: MPI_Win_sync then orders loads and stores.
  GRIDNN_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  return std::unique_ptr<SharedReduce>(new SharedReduce(dup, win, std::move(bases), rank, slot_bytes));
}

SharedReduce::SharedReduce(MPI_Comm comm, MPI_Win win, std::vector<char*> bases, int rank, int64_t slot_bytes)
    : comm_(comm), win_(win), bases_(std::move(bases)), rank_(rank), slot_bytes_(slot_bytes) {}

SharedReduce::~SharedReduce() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || std::uncaught_exceptions() > 0) return;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
  MPI_Comm_free(&comm_);
}

void SharedReduce::sync(const std::function<void()>& barrier) {
  GRIDNN_CHECK_MPI(MPI_Win_sync(win_));
  barrier();
  GRIDNN_CHECK_MPI(MPI_Win_sync(win_));
}

void SharedReduce::all_reduce(void* data, int64_t count, DType dtype, ReduceOp op,
                              const std::function<void()>& barrier) {
  const int64_t es = int64_t(dtype_size(dtype));
  const int64_t chunk = slot_bytes_ / es;
  const int ranks = int(bases_.size());
  char* bytes = static_cast<char*>(data);
  for (int64_t begin = 0; begin < count; begin += chunk) {
    const int64_t n = std::min(chunk, count - begin);
    const int64_t slot = next_slot_ * slot_bytes_;
    next_slot_ ^= 1;
    char* own = bytes + begin * es;
    std::memcpy(bases_[size_t(rank_)] + slot, own, size_t(n * es));
    sync(barrier);
    const Range block = balanced_range(n, ranks, rank_);
    if (block.size() > 0) {
      const int64_t at = block.begin * es;
      std::memcpy(own + at, bases_[0] + slot + at, size_t(block.size() * es));
      for (int r = 1; r < ranks; ++r) detail::combine(own + at, bases_[size_t(r)] + slot + at, block.size(), dtype, op);
      std::memcpy(bases_[size_t(rank_)] + slot + at, own + at, size_t(block.size() * es));
    }
    sync(barrier);
    for (int r = 0; r < ranks; ++r) {
      if (r == rank_) continue;
      const Range theirs = balanced_range(n, ranks, r);
      const int64_t at = theirs.begin * es;
      std::memcpy(own + at, bases_[size_t(r)] + slot + at, size_t(theirs.size() * es));
    }
  }
}

}  // namespace gridnn::parallel
