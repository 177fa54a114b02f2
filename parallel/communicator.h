// Communicators: the collectives the distributed layers need, on tensors, counted.
//
// One Communicator per group of ranks (the grid's row_comm, col_comm, stage and world,
// docs/design.md §4). Every call is collective over the group unless it says otherwise, takes
// contiguous tensors whose dtype and shapes agree across the ranks, and works on any
// device: the MPI backend stages device tensors through pinned host memory, the NCCL
// backend (nccl_communicator.h) takes them directly. Outputs are passed in.
//
// Every call is recorded in comm_log(): communicator, operation, layer (the innermost
// CommLayerScope), elements and bytes this rank contributed, and seconds spent, so
// `gridnn-train --comm-report` can print a per-layer table and tests can compare the
// counts with docs/design.md §4's formulas.
//
// The layers use them in forward/backward pairs (Megatron's rule): parallel/mappings.h.
#pragma once

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gridnn::parallel {

enum class ReduceOp { sum, max };

// A non-blocking call under way (Communicator::start_all_reduce, start_send_recv). The tensors
// it was started on must stay alive and untouched until it completes; then they hold the
// result. test() advances it (MPI makes progress only inside MPI calls: call it now and then
// while computing) and says whether it is complete; wait() returns once it is. A call that runs
// only when waited for (start_all_reduce through shared memory) stays incomplete until then:
// poll with test() between computations, never in a loop instead of wait(). Destroying an
// unfinished one waits for it.
class PendingCall {
 public:
  virtual ~PendingCall() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// The public calls check their arguments (each rule stated once, in communicator.cpp, with
// messages that name the communicator and the operation), time them and record them in
// comm_log(); a backend implements the protected do_* calls, which see only arguments that
// passed.
class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }  // "row", "col", "stage", "world"
  int max_tag() const { return max_tag_; }           // send_recv's tags are 0 ... max_tag()

  // t = sum (or max) of t over the ranks, in place.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  // all_reduce without blocking: starts it and returns; the result, once complete, is bitwise
  // that of all_reduce. Collective: every rank starts its all-reduces on this communicator in
  // the same order (they may complete, and be waited for, in any order). Recorded in
  // comm_log() as one "all_reduce" whose seconds are those spent inside start, test and wait
  // (the time it was exposed on this thread), under the CommLayerScope current at the start.
  // With the MPI backend on a communicator whose ranks share one node, it runs through shared
  // memory only when it or one started after it is waited for (or destroyed): a rank that
  // waits for it needs every other rank to reach such a wait without first waiting on this
  // rank. Its time is then recorded under the call whose wait ran it.
  std::unique_ptr<PendingCall> start_all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  // out = the ranks' `in` stacked along dimension 0 in rank order:
  // out.size(0) == size() * in.size(0), the other dimensions equal.
  void all_gather(const Tensor& in, Tensor& out);
  // As all_gather with rows[i] rows (of dimension 0) from rank i; in.size(0) == rows[rank()].
  void all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows);
  // The opposite of all_gather: out = the sum over ranks of their in's block rank(), where
  // in.size(0) == size() * out.size(0).
  void reduce_scatter(const Tensor& in, Tensor& out);
  // As reduce_scatter with rows[i] rows in block i; out.size(0) == rows[rank()].
  void reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows);
  // t = root's t.
  void broadcast(Tensor& t, int root);
  // Point to point, not collective: sends `send` to rank `dest` and receives `recv` from
  // rank `source` at once (no deadlock whatever the order); -1 (or an undefined tensor)
  // skips that side. Messages between two ranks match by `tag`. start_send_recv, waited for.
  void send_recv(const Tensor& send, int dest, Tensor& recv, int source, int tag);
  // send_recv without blocking: posts both sides and returns; once complete, the result is
  // send_recv's. Recorded as one "send_recv" whose seconds are those spent inside start, test
  // and wait, under the CommLayerScope current at the start. A backend that cannot overlap
  // (the self communicator, NCCL's) completes it within the call.
  std::unique_ptr<PendingCall> start_send_recv(const Tensor& send, int dest, Tensor& recv, int source, int tag);
  void barrier();

 protected:
  Communicator(std::string name, int rank, int size, int max_tag = INT_MAX)
      : name_(std::move(name)), rank_(rank), size_(size), max_tag_(max_tag) {}

  // The communicator that carries a call on `tensors` in this one's place, or null for this
  // one. It checks and records the call itself. `tensors`: the call's tensors, none for
  // barrier(), null for a side send_recv skips. The NCCL backend hands host tensors to its
  // host communicator.
  virtual Communicator* carrier(std::initializer_list<const Tensor*> tensors, const char* op);

  // The backend's calls, as the public ones above.
  virtual void do_all_reduce(Tensor& t, ReduceOp op) = 0;
  // Returns null when the all-reduce completed within the call; what it returns is timed and
  // recorded by start_all_reduce. This default runs do_all_reduce (the self communicator:
  // nothing to overlap).
  virtual std::unique_ptr<PendingCall> do_start_all_reduce(Tensor& t, ReduceOp op);
  virtual void do_all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void do_all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) = 0;
  virtual void do_reduce_scatter(const Tensor& in, Tensor& out) = 0;
  virtual void do_reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) = 0;
  virtual void do_broadcast(Tensor& t, int root) = 0;
  // `send` / `recv` are null for a side the call skips.
  virtual void do_send_recv(const Tensor* send, int dest, Tensor* recv, int source, int tag) = 0;
  // As do_start_all_reduce: null when it completed within the call (this default runs
  // do_send_recv).
  virtual std::unique_ptr<PendingCall> do_start_send_recv(const Tensor* send, int dest, Tensor* recv, int source,
                                                          int tag);
  virtual void do_barrier() = 0;

 private:
  std::string name_;
  int rank_, size_, max_tag_;
};

// A group of one: every collective is a copy (or nothing). Works without MPI.
std::unique_ptr<Communicator> make_self_communicator(const std::string& name);
// Rank `rank` of a group of `size` that does not run: it has a rank and a size, and every
// call is an error. Layers built on it describe their communication for the cost model
// (ProcessGrid::planned).
std::unique_ptr<Communicator> make_planning_communicator(const std::string& name, int rank, int size);

// ---- counting ---------------------------------------------------------------------------

struct CommRecord {
  std::string comm;   // communicator name
  std::string op;     // "all_reduce", "all_gather", ...
  std::string layer;  // innermost CommLayerScope, or "" outside any
  // This rank's elements, per operation: all_reduce t.numel(); all_gather(v) in.numel();
  // reduce_scatter(v) in.numel(); broadcast t.numel() on every rank (root or not);
  // send_recv send.numel() (0 when it only receives); barrier 0.
  int64_t elements = 0;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t received = 0;  // send_recv: the elements this rank received (0 for collectives)
};

// add() may be called from several threads at once (tests run ranks as threads, and a
// watchdog may end a call); records() and the sums read the log when no call is under way.
class CommLog {
 public:
  void add(CommRecord record);
  const std::vector<CommRecord>& records() const { return records_; }
  void clear();
  // Sum of elements over the records matching the given fields ("" matches any).
  int64_t elements(const std::string& comm, const std::string& op, const std::string& layer = "") const;
  // A table: one row per (layer, communicator, operation) with calls, elements, MB, seconds.
  std::string report() const;

 private:
  std::mutex adding_;
  std::vector<CommRecord> records_;
};

// This process's log.
CommLog& comm_log();

// Labels the communication of a layer: `CommLayerScope scope("layer1.0.conv1");`.
class CommLayerScope {
 public:
  explicit CommLayerScope(std::string layer);
  ~CommLayerScope();
  CommLayerScope(const CommLayerScope&) = delete;
  CommLayerScope& operator=(const CommLayerScope&) = delete;
  static const std::string& current();

 private:
  std::string previous_;
};

}  // namespace gridnn::parallel
