// The MPI backend: non-blocking MPI calls on bytes, polite waiting, fixed-order reductions,
// and the non-blocking all-reduce (AsyncAllReduce)
// (see mpi_communicator.h for the why).
#include "parallel/mpi_communicator.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm_detail.h"
#include "parallel/mpi_check.h"
#include "parallel/pinned_staging.h"
#include "parallel/process_grid.h"
#include "parallel/progress_board.h"
#include "parallel/shared_reduce.h"

namespace gridnn::parallel {

// ---- polite waiting ---------------------------------------------------------------------------

namespace {

constexpr auto kPoliteSleep = std::chrono::microseconds(20);

std::atomic<int> g_forced_mode{-1};    // set_mpi_polite_wait
std::atomic<int> g_shared_reduce{-1};  // set_mpi_shared_reduce
std::atomic<int> g_node_ranks{1};      // most ranks of one communicator seen on this node

int env_mode() {
  static const int mode = [] {
    const char* v = std::getenv("GRIDNN_POLITE_WAIT");
    if (!v || !*v) return -1;
    std::string s(v);
    GRIDNN_REQUIRE(s == "0" || s == "1",
                   "GRIDNN_POLITE_WAIT must be 0 (plain MPI_Wait) or 1 (MPI_Test "
                   "and sleep), got \"",
                   s, "\"");
    return s == "1" ? 1 : 0;
  }();
  return mode;
}

// GRIDNN_SHARED_REDUCE: 0 turns the shared-window all-reduce off (the message path then
// runs on one node too); unset or 1, on.
bool env_shared_reduce() {
  static const bool on = [] {
    const char* v = std::getenv("GRIDNN_SHARED_REDUCE");
    if (!v || !*v) return true;
    std::string s(v);
    GRIDNN_REQUIRE(s == "0" || s == "1",
                   "GRIDNN_SHARED_REDUCE must be 0 (all-reduces by messages) or 1 (through shared "
                   "memory where a communicator's ranks share a node), got \"",
                   s, "\"");
    return s == "1";
  }();
  return on;
}

// The cores this process may run on (its affinity mask, at most the machine's).
int usable_cores() {
  int cores = int(std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int allowed = CPU_COUNT(&set);
    if (allowed > 0 && (cores <= 0 || allowed < cores)) cores = allowed;
  }
  return std::max(cores, 1);
}

// How many ranks of `comm` share this node (collective over comm).
int node_local_size(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int n = 1;
  GRIDNN_CHECK_MPI(MPI_Comm_size(node, &n));
  GRIDNN_CHECK_MPI(MPI_Comm_free(&node));
  return n;
}

}  // namespace

bool mpi_polite_wait() {
  int forced = g_forced_mode.load();
  if (forced >= 0) return forced == 1;
  int env = env_mode();
  if (env >= 0) return env == 1;
  // Each rank also runs its OpenMP threads: 2 ranks of 2 threads already crowd 2 cores, and
  // a rank spinning in MPI_Wait then takes the core its neighbour computes on.
  static const int cores = usable_cores();
  return g_node_ranks.load() * std::max(omp_get_max_threads(), 1) > cores;
}

bool mpi_shared_reduce() {
  const int forced = g_shared_reduce.load();
  return forced >= 0 ? forced == 1 : env_shared_reduce();
}

void set_mpi_shared_reduce(int mode) {
  GRIDNN_REQUIRE(mode >= -1 && mode <= 1, "set_mpi_shared_reduce: mode must be -1 (the environment), 0 or 1, got ",
                 mode);
  g_shared_reduce.store(mode);
}

void set_mpi_polite_wait(int mode) {
  GRIDNN_REQUIRE(mode >= -1 && mode <= 1, "set_mpi_polite_wait: mode must be -1 (detect), 0 or 1, got ", mode);
  g_forced_mode.store(mode);
}

// ---- the communicator -------------------------------------------------------------------------

namespace {

using namespace detail;

class AsyncAllReduce;
class AsyncSendRecv;
class DeferredAllReduce;

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm` (it duplicates it for start_all_reduce's phases, here rather than
  // at the first start, which would block in MPI_Comm_dup until every member started too).
  MpiCommunicator(MPI_Comm comm, std::string name, int rank, int size, int tag_ub, BoardSlot slot)
      : Communicator(std::move(name), rank, size, tag_ub), comm_(comm), slot_(std::move(slot)) {
    if (size > 1) {
      GRIDNN_CHECK_MPI(MPI_Comm_dup(comm_, &exchange_comm_));
      GRIDNN_CHECK_MPI(MPI_Comm_dup(comm_, &gather_comm_));
      shared_ = SharedReduce::make(comm_, mpi_shared_reduce());
      if (shared_) {
        started_shared_ = SharedReduce::make(comm_, true);
        started_slot_ = join_progress_board(started_shared_->comm());
      }
    }
  }

  bool shares_memory() const { return shared_ != nullptr; }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (shared_ && std::uncaught_exceptions() == 0) {
      // Freeing a window waits for every rank (MPI_Win_free): a watched barrier first, so that
      // a rank which never comes is named (comm_timeout), not waited for in silence.
      try {
        WatchedWait freeing(slot_, name(), "free (the shared-memory windows)", true);
        const WatchScope scope(*this, freeing);
        MPI_Request req;
        GRIDNN_CHECK_MPI(MPI_Ibarrier(shared_->comm(), &req));
        wait(1, &req, MPI_STATUSES_IGNORE);
      } catch (...) {  // MPI failed: the windows are freed below or left to the job's end
      }
    }
    started_shared_.reset();
    shared_.reset();
    for (MPI_Comm* c : {&comm_, &exchange_comm_, &gather_comm_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    Watching watch(*this, "all_reduce");
    StagedTensor host(pinned_, t, /*fill=*/true);
    const int64_t es = int64_t(dtype_size(t.dtype()));
    const int64_t total = to_count(t.nbytes(), "all_reduce");
    if (shared_) {
      shared_all_reduce(*shared_, host.data(), t.numel(), t.dtype(), op);
    } else if (size() > 1 && total > 0) {
      // Reduce block i on rank i in rank order, then share the reduced blocks byte for byte.
      std::vector<int64_t> blocks(static_cast<size_t>(size()));
      for (int i = 0; i < size(); ++i) blocks[size_t(i)] = balanced_range(t.numel(), size(), i).size();
      char* base = static_cast<char*>(host.data());
      char* mine = base + balanced_range(t.numel(), size(), rank()).begin * es;
      reduce_blocks("all_reduce", base, blocks, t.dtype(), op, mine);
      std::vector<int> counts, displs;
      byte_layout("all_reduce", blocks, es, &counts, &displs);
      MPI_Request req;
      GRIDNN_CHECK_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, counts.data(), displs.data(), MPI_BYTE,
                                       comm_, &req));
      wait(1, &req, MPI_STATUSES_IGNORE);
    }
    host.store(t);
  }

  std::unique_ptr<PendingCall> do_start_all_reduce(Tensor& t, ReduceOp op) override;

  void do_all_gather(const Tensor& in, Tensor& out) override {
    Watching watch(*this, "all_gather");
    gather("all_gather", in, out, even_rows(*this, in.size(0)));
  }

  void do_all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    Watching watch(*this, "all_gatherv");
    gather("all_gatherv", in, out, rows);
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out) override {
    Watching watch(*this, "reduce_scatter");
    scatter("reduce_scatter", in, out, even_rows(*this, out.size(0)));
  }

  void do_reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    Watching watch(*this, "reduce_scatterv");
    scatter("reduce_scatterv", in, out, rows);
  }

  void do_broadcast(Tensor& t, int root) override {
    Watching watch(*this, "broadcast");
    StagedTensor host(pinned_, t, /*fill=*/rank() == root);
    MPI_Request req;
    GRIDNN_CHECK_MPI(MPI_Ibcast(host.data(), to_count(int64_t(t.nbytes()), "broadcast"), MPI_BYTE, root, comm_, &req));
    wait(1, &req, MPI_STATUSES_IGNORE);
    host.store(t);
  }

  void do_send_recv(const Tensor* send, int dest, Tensor* recv, int source, int tag) override;
  std::unique_ptr<PendingCall> do_start_send_recv(const Tensor* send, int dest, Tensor* recv, int source,
                                                  int tag) override;

  void do_barrier() override {
    Watching watch(*this, "barrier");
    MPI_Request req;
    GRIDNN_CHECK_MPI(MPI_Ibarrier(comm_, &req));
    wait(1, &req, MPI_STATUSES_IGNORE);
  }

 private:
  // MPI counts are ints: one call moves less than 2 GiB.
  int to_count(int64_t bytes, const char* op) const {
    GRIDNN_REQUIRE(bytes <= INT_MAX, where(*this, op), ": ", bytes,
                   " bytes in one call exceed MPI's int counts (2 GiB); split the tensor");
    return int(bytes);
  }

  // Byte counts and displacements of blocks of `elems[i]` elements of `es` bytes, back to back.
  void byte_layout(const char* op, const std::vector<int64_t>& elems, int64_t es, std::vector<int>* counts,
                   std::vector<int>* displs) const {
    counts->resize(elems.size());
    displs->resize(elems.size());
    int64_t offset = 0;
    for (size_t i = 0; i < elems.size(); ++i) {
      (*counts)[i] = to_count(elems[i] * es, op);
      (*displs)[i] = to_count(offset, op);
      offset += elems[i] * es;
    }
    to_count(offset, op);
  }

  // `in` holds blocks[i] elements for rank i, back to back; writes into `out` (blocks[rank()]
  // elements) the combination of every rank's block rank(), in rank order. `out` may lie
  // inside `in`: it is written only after the exchange has finished reading `in`.
  void reduce_blocks(const char* op_name, const void* in, const std::vector<int64_t>& blocks, DType dtype, ReduceOp op,
                     void* out) {
    const int64_t es = int64_t(dtype_size(dtype));
    const int64_t mine = blocks[size_t(rank())];
    std::vector<int> send_counts, send_displs;
    byte_layout(op_name, blocks, es, &send_counts, &send_displs);
    std::vector<int> recv_counts, recv_displs;
    byte_layout(op_name, std::vector<int64_t>(size_t(size()), mine), es, &recv_counts, &recv_displs);
    scratch_.resize(size_t(size() * mine * es));
    MPI_Request req;
    GRIDNN_CHECK_MPI(MPI_Ialltoallv(in, send_counts.data(), send_displs.data(), MPI_BYTE, scratch_.data(),
                                    recv_counts.data(), recv_displs.data(), MPI_BYTE, comm_, &req));
    wait(1, &req, MPI_STATUSES_IGNORE);
    if (mine == 0) return;
    std::memcpy(out, scratch_.data(), size_t(mine * es));
    for (int i = 1; i < size(); ++i) combine(out, scratch_.data() + size_t(i * mine * es), mine, dtype, op);
  }

  void gather(const char* op, const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) {
    // A host `in` inside `out` is copied first (MPI forbids aliasing); device tensors are
    // staged into separate pinned buffers.
    const Tensor in_copy = in.device().is_cpu() && in.shares_storage_with(out) ? in.clone() : Tensor();
    StagedTensor in_host(pinned_, in_copy.defined() ? in_copy : in, /*fill=*/true);
    StagedTensor out_host(pinned_, out, /*fill=*/false);
    std::vector<int> counts, displs;
    byte_layout(op, rows, row_bytes(in), &counts, &displs);
    MPI_Request req;
    GRIDNN_CHECK_MPI(MPI_Iallgatherv(in_host.data(), counts[size_t(rank())], MPI_BYTE, out_host.data(), counts.data(),
                                     displs.data(), MPI_BYTE, comm_, &req));
    wait(1, &req, MPI_STATUSES_IGNORE);
    out_host.store(out);
  }

  void scatter(const char* op, const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) {
    StagedTensor in_host(pinned_, in, /*fill=*/true);
    StagedTensor out_host(pinned_, out, /*fill=*/false);
    const int64_t row_elems = row_bytes(in) / int64_t(dtype_size(in.dtype()));
    std::vector<int64_t> blocks(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) blocks[i] = rows[i] * row_elems;
    to_count(in.nbytes(), op);
    reduce_blocks(op, in_host.data(), blocks, in.dtype(), ReduceOp::sum, out_host.data());
    out_host.store(out);
  }

  // `w` as the watched wait of the call under way (watch_) for a scope; then the one before.
  class WatchScope {
   public:
    WatchScope(MpiCommunicator& c, WatchedWait& w) : c_(c), outer_(c.watch_) { c.watch_ = &w; }
    ~WatchScope() { c_.watch_ = outer_; }
    WatchScope(const WatchScope&) = delete;
    WatchScope& operator=(const WatchScope&) = delete;

   private:
    MpiCommunicator& c_;
    WatchedWait* outer_;
  };

  // The watched wait of the call under way: every collective's do_* call makes one (it counts
  // as the next collective on the board, progress_board.h); a send_recv's AsyncSendRecv
  // watches its own.
  struct Watching {
    Watching(MpiCommunicator& c, const char* op) : wait(c.slot_, c.name(), op, true), scope(c, wait) {}
    WatchedWait wait;
    WatchScope scope;
  };

  // Waits for `n` requests: MPI_Waitall when no time limit applies and waiting is plain;
  // otherwise MPI_Testall in a loop (with a short sleep when polite) that ends the job once
  // the call has waited longer than comm_timeout().
  void wait(int n, MPI_Request* reqs, MPI_Status* statuses) {
    const bool polite = mpi_polite_wait();
    if (!polite && comm_timeout() <= 0) {
      GRIDNN_CHECK_MPI(MPI_Waitall(n, reqs, statuses));
      return;
    }
    if (watch_) watch_->begin();
    for (;;) {
      int done = 0;
      GRIDNN_CHECK_MPI(MPI_Testall(n, reqs, &done, statuses));
      if (done) return;
      if (watch_) watch_->expired();
      if (polite) std::this_thread::sleep_for(kPoliteSleep);
    }
  }

  // Starts phase 2 of the non-blocking all-reduces whose phase 1 is done, in start order.
  void advance_exchanges();

  // The all-reduce of `count` elements at `data` through `window`, its barriers watched.
  void shared_all_reduce(SharedReduce& window, void* data, int64_t count, DType dtype, ReduceOp op) {
    window.all_reduce(data, count, dtype, op, [this, &window] {
      MPI_Request req;
      GRIDNN_CHECK_MPI(MPI_Ibarrier(window.comm(), &req));
      wait(1, &req, MPI_STATUSES_IGNORE);
    });
  }
  // Runs the deferred all-reduces in start order, up to and including `last` (all: null).
  void run_deferred(DeferredAllReduce* last);

  // Polls `reqs` until done, watched by `watch` (the call's own wait, as wait() above).
  void poll_until_done(int n, MPI_Request* reqs, MPI_Status* statuses, WatchedWait& watch);

  friend class AsyncAllReduce;
  friend class AsyncSendRecv;
  friend class DeferredAllReduce;
  MPI_Comm comm_;
  BoardSlot slot_;                // this communicator on the progress board
  BoardSlot started_slot_;        // its deferred all-reduces, counted as they run (on a node)
  WatchedWait* watch_ = nullptr;  // the call under way (Watching)
  std::vector<char> scratch_;     // the blocks received by reduce_blocks, reused across calls
  PinnedPool pinned_;             // staging buffers of device tensors (pinned_staging.h)
  // The non-blocking all-reduces' two phases run on duplicates of comm_ (made with the
  // communicator), one per phase: MPI matches collectives by their order on a
  // communicator, and a rank may find an exchange finished (and start its gather) sooner
  // than another, between the blocking calls on comm_. On each duplicate every rank issues
  // the same sequence: exchanges in start order, gathers in start order (advance_exchanges).
  MPI_Comm exchange_comm_ = MPI_COMM_NULL, gather_comm_ = MPI_COMM_NULL;
  std::deque<AsyncAllReduce*> exchanging_;  // phase 1 under way, in start order
  // Where every rank shares this node: the window of the blocking all-reduces, that of the
  // started ones (each window's barriers keep their own order), and the started ones not run
  // yet, in start order (DeferredAllReduce).
  std::unique_ptr<SharedReduce> shared_, started_shared_;
  std::deque<DeferredAllReduce*> deferred_;
};

// One start_all_reduce: the all_reduce above, cut at its two waits. Phase 1 exchanges the
// blocks (all-to-all); once it is done this rank sums its block in rank order and phase 2
// all-gathers the reduced blocks in place. Bitwise the result of all_reduce.
class AsyncAllReduce final : public PendingCall {
 public:
  AsyncAllReduce(MpiCommunicator& comm, Tensor& t, ReduceOp op)
      : comm_(comm), t_(t), op_(op), watch_(comm.slot_, comm.name(), "all_reduce (started without blocking)", true) {
    host_ = StagedTensor(comm.pinned_, t, /*fill=*/true);
    const int n = comm.size();
    const int64_t es = int64_t(dtype_size(t.dtype()));
    comm.to_count(t.nbytes(), "all_reduce");
    if (n > 1 && t.numel() > 0) {
      std::vector<int64_t> blocks(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) blocks[size_t(i)] = balanced_range(t.numel(), n, i).size();
      mine_ = blocks[size_t(comm.rank())];
      comm.byte_layout("all_reduce", blocks, es, &counts_, &displs_);
      comm.byte_layout("all_reduce", std::vector<int64_t>(size_t(n), mine_), es, &recv_counts_, &recv_displs_);
      scratch_.resize(size_t(n * mine_ * es));
      GRIDNN_CHECK_MPI(MPI_Ialltoallv(host_.data(), counts_.data(), displs_.data(), MPI_BYTE, scratch_.data(),
                                      recv_counts_.data(), recv_displs_.data(), MPI_BYTE, comm.exchange_comm_, &req_));
      phase_ = Phase::exchanging;
      comm.exchanging_.push_back(this);
      comm.advance_exchanges();
    } else {
      phase_ = Phase::done;
    }
    if (phase_ == Phase::done) complete();
  }

  ~AsyncAllReduce() override {
    if (phase_ == Phase::done) return;
    try {
      wait();
    } catch (...) {  // MPI failed: nothing left to do but forget it
    }
    auto& q = comm_.exchanging_;
    q.erase(std::remove(q.begin(), q.end(), this), q.end());
  }

  bool test() override {
    const bool done = poll();
    if (done) complete();
    return done;
  }

  void wait() override {
    if (phase_ == Phase::done) return;
    const bool polite = mpi_polite_wait();
    while (!poll()) {
      watch_.expired();
      if (polite) std::this_thread::sleep_for(kPoliteSleep);
    }
    complete();
  }

  // Complete within start_all_reduce (a group of one, or nothing to reduce).
  bool completed() const { return stored_; }

  // Phase 1 is done: reduce this rank's block and start phase 2.
  void start_gather() {
    const int64_t es = int64_t(dtype_size(t_.dtype()));
    char* base = static_cast<char*>(host_.data());
    if (mine_ > 0) {
      char* mine = base + int64_t(displs_[size_t(comm_.rank())]);
      std::memcpy(mine, scratch_.data(), size_t(mine_ * es));
      for (int i = 1; i < comm_.size(); ++i)
        combine(mine, scratch_.data() + size_t(i * mine_ * es), mine_, t_.dtype(), op_);
    }
    GRIDNN_CHECK_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, counts_.data(), displs_.data(), MPI_BYTE,
                                     comm_.gather_comm_, &req_));
    phase_ = Phase::gathering;
  }

 private:
  friend class MpiCommunicator;
  enum class Phase { exchanging, gathering, done };

  // Advances; true once the result is in host_.
  bool poll() {
    if (phase_ == Phase::exchanging) comm_.advance_exchanges();
    if (phase_ == Phase::gathering) {
      int done = 0;
      GRIDNN_CHECK_MPI(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
      if (done) phase_ = Phase::done;
    }
    return phase_ == Phase::done;
  }

  // Once: the result back to the device (Communicator times and records the call).
  void complete() {
    if (stored_) return;
    stored_ = true;
    if (host_.staged()) host_.store(t_);
  }

  MpiCommunicator& comm_;
  Tensor t_;
  StagedTensor host_;  // t_'s bytes on the host (a pinned copy for a device tensor)
  ReduceOp op_;
  int64_t mine_ = 0;                                              // elements of this rank's block
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;  // bytes; alive while MPI uses them
  std::vector<char> scratch_;                                     // every rank's copy of this rank's block
  MPI_Request req_ = MPI_REQUEST_NULL;
  Phase phase_ = Phase::done;
  bool stored_ = false;
  WatchedWait watch_;  // counted as a collective when started; watched in wait()
};

// One start_all_reduce on a communicator whose ranks share this node: the shared-window
// all-reduce (a window of its own, apart from the blocking all-reduces'), run when it or one
// started after it is waited for, always after those started before it. The window's copies
// need no message progress, so there is nothing to advance meanwhile: on a node the
// all-reduce costs the same work whenever it runs, and running it once every rank is there
// waits least. Bitwise the result of all_reduce. The comm log counts its time under the call
// whose wait ran it.
class DeferredAllReduce final : public PendingCall {
 public:
  DeferredAllReduce(MpiCommunicator& comm, Tensor& t, ReduceOp op)
      : comm_(comm), t_(t), op_(op), layer_(CommLayerScope::current()) {
    comm.to_count(t.nbytes(), "all_reduce");
    host_ = StagedTensor(comm.pinned_, t, /*fill=*/true);
    comm.deferred_.push_back(this);
  }

  // Waits for it, unless an exception unwinds: its barriers would need the other ranks, which
  // may be waiting for this one (the failing rank ends the job, MpiSession).
  ~DeferredAllReduce() override {
    if (!done_ && !ran_ && std::uncaught_exceptions() == 0) {
      try {
        wait();
      } catch (...) {  // MPI failed: nothing left to do but forget it
      }
    }
    auto& q = comm_.deferred_;
    q.erase(std::remove(q.begin(), q.end(), this), q.end());
  }

  bool test() override { return done_; }

  void wait() override {
    if (done_) return;
    GRIDNN_REQUIRE(!ran_, where(comm_, "all_reduce"), ": this started all-reduce failed when it ran");
    comm_.run_deferred(this);
  }

  // Runs it (run_deferred, in start order), watched as its own call.
  void run() {
    ran_ = true;
    const CommLayerScope scope(layer_);
    watch_.emplace(comm_.started_slot_, comm_.name(), "all_reduce (started without blocking)", true);
    const MpiCommunicator::WatchScope watching(comm_, *watch_);
    comm_.shared_all_reduce(*comm_.started_shared_, host_.data(), t_.numel(), t_.dtype(), op_);
    done_ = true;
    if (host_.staged()) host_.store(t_);
  }

 private:
  MpiCommunicator& comm_;
  Tensor t_;
  StagedTensor host_;  // t_'s bytes on the host (a pinned copy for a device tensor)
  ReduceOp op_;
  bool ran_ = false, done_ = false;
  std::string layer_;  // the CommLayerScope at its start
  // Counted as a collective of the started all-reduces' slot when it runs, in start order on
  // every rank, so that a rank which never waits for it is not reported as having arrived.
  std::optional<WatchedWait> watch_;
};

void MpiCommunicator::run_deferred(DeferredAllReduce* last) {
  while (!deferred_.empty()) {
    DeferredAllReduce* first = deferred_.front();
    deferred_.pop_front();
    first->run();
    if (first == last) return;
  }
}

// One send_recv, both sides posted at once (start_send_recv, and send_recv, which waits for
// it at once); once both are done the received byte count is checked and stored.
class AsyncSendRecv final : public PendingCall {
 public:
  AsyncSendRecv(MpiCommunicator& comm, const Tensor* send, int dest, Tensor* recv, int source, int tag)
      : comm_(comm),
        source_(source),
        tag_(tag),
        watch_(comm.slot_, comm.name(), "send_recv", false, std::vector<int>{recv ? source : -1, send ? dest : -1}) {
    // A host `send` sharing storage with `recv` is copied first (MPI forbids aliasing); a
    // device one is staged into its own pinned buffer anyway.
    // Both sizes are checked before anything is posted.
    const int send_bytes = send ? comm.to_count(int64_t(send->nbytes()), "send_recv") : 0;
    recv_bytes_ = recv ? comm.to_count(int64_t(recv->nbytes()), "send_recv") : 0;
    if (send) {
      const bool aliased = recv && send->device().is_cpu() && send->shares_storage_with(*recv);
      send_ = aliased ? send->clone() : *send;  // held until complete
      send_host_ = StagedTensor(comm.pinned_, send_, /*fill=*/true);
    }
    if (recv) {
      recv_ = *recv;
      recv_host_ = StagedTensor(comm.pinned_, *recv, /*fill=*/false);
    }
    if (recv)
      GRIDNN_CHECK_MPI(MPI_Irecv(recv_host_.data(), recv_bytes_, MPI_BYTE, source, tag, comm.comm_, &reqs_[n_++]));
    if (send) {
      try {
        GRIDNN_CHECK_MPI(MPI_Isend(send_host_.data(), send_bytes, MPI_BYTE, dest, tag, comm.comm_, &reqs_[n_++]));
      } catch (...) {  // the receive already posted writes into recv_: take it back first
        if (recv) {
          MPI_Cancel(&reqs_[0]);
          MPI_Wait(&reqs_[0], MPI_STATUS_IGNORE);
        }
        throw;
      }
    }
  }

  ~AsyncSendRecv() override {
    if (done_) return;
    try {
      wait();
    } catch (...) {  // MPI failed: nothing left to do but forget it
    }
  }

  bool test() override {
    if (done_) return true;
    int done = 0;
    GRIDNN_CHECK_MPI(MPI_Testall(n_, reqs_, &done, statuses_));
    if (done) complete();
    return done_;
  }

  void wait() override {
    if (done_) return;
    comm_.poll_until_done(n_, reqs_, statuses_, watch_);
    complete();
  }

 private:
  void complete() {
    done_ = true;
    if (!recv_.defined()) return;
    int got = 0;
    GRIDNN_CHECK_MPI(MPI_Get_count(&statuses_[0], MPI_BYTE, &got));
    GRIDNN_REQUIRE(got == recv_bytes_, where(comm_, "send_recv"), ": received ", got, " bytes from rank ", source_,
                   " (tag ", tag_, ") into `recv` ", recv_.str(), ", which holds ", recv_bytes_,
                   "; the sender's tensor must match");
    recv_host_.store(recv_);
  }

  MpiCommunicator& comm_;
  int source_, tag_;
  Tensor send_, recv_;  // held until complete (send_: a copy where it shared recv's storage)
  StagedTensor send_host_, recv_host_;
  int recv_bytes_ = 0;
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Status statuses_[2];
  int n_ = 0;
  bool done_ = false;
  WatchedWait watch_;
};

void MpiCommunicator::do_send_recv(const Tensor* send, int dest, Tensor* recv, int source, int tag) {
  AsyncSendRecv(*this, send, dest, recv, source, tag).wait();
}

std::unique_ptr<PendingCall> MpiCommunicator::do_start_send_recv(const Tensor* send, int dest, Tensor* recv, int source,
                                                                 int tag) {
  return std::make_unique<AsyncSendRecv>(*this, send, dest, recv, source, tag);
}

void MpiCommunicator::poll_until_done(int n, MPI_Request* reqs, MPI_Status* statuses, WatchedWait& watch) {
  const WatchScope scope(*this, watch);
  wait(n, reqs, statuses);
}

void MpiCommunicator::advance_exchanges() {
  while (!exchanging_.empty()) {
    AsyncAllReduce* front = exchanging_.front();
    int done = 0;
    GRIDNN_CHECK_MPI(MPI_Test(&front->req_, &done, MPI_STATUS_IGNORE));
    if (!done) return;
    exchanging_.pop_front();
    front->start_gather();
  }
}

std::unique_ptr<PendingCall> MpiCommunicator::do_start_all_reduce(Tensor& t, ReduceOp op) {
  if (shared_) return std::make_unique<DeferredAllReduce>(*this, t, op);
  auto started = std::make_unique<AsyncAllReduce>(*this, t, op);
  if (started->completed()) return nullptr;
  return started;
}

}  // namespace

bool reduces_through_shared_memory(const Communicator& comm) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&comm);
  return mpi && mpi->shares_memory();
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name) {
  GRIDNN_REQUIRE(comm != MPI_COMM_NULL, "make_mpi_communicator(\"", name, "\"): MPI_COMM_NULL");
  GRIDNN_REQUIRE(comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF, "make_mpi_communicator(\"", name,
                 "\"): it frees the communicator it gets; pass MPI_Comm_dup of MPI_COMM_WORLD or SELF");
  GRIDNN_CHECK_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 1, flag = 0;
  GRIDNN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  GRIDNN_CHECK_MPI(MPI_Comm_size(comm, &size));
  int* tag_ub = nullptr;
  GRIDNN_CHECK_MPI(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &flag));
  int local = node_local_size(comm);
  int seen = g_node_ranks.load();
  while (local > seen && !g_node_ranks.compare_exchange_weak(seen, local)) {
  }
  env_mode();  // a bad GRIDNN_POLITE_WAIT fails here, not in the first collective
  BoardSlot slot = join_progress_board(comm);
  return std::make_unique<MpiCommunicator>(comm, std::move(name), rank, size, flag && tag_ub ? *tag_ub : 32767,
                                           std::move(slot));
}

}  // namespace gridnn::parallel
