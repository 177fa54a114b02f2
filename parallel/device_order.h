// The order of NCCL operations on one GPU: what a newly enqueued operation waits for, and
// what waits for it (docs/design.md §4, "Ordering NCCL operations"). Pure C++, no CUDA and
// no NCCL, so that the rule is checked on the CPU: test/parallel/test_device_order.cpp runs
// many ranks' programs under it. nccl_communicator.cpp does what a Plan says with streams
// and events.
//
// The rule:
//   - each communicator has its own stream, which runs its operations in the order they are
//     issued (one NCCL communicator does so anyway);
//   - before an operation, its stream waits for the compute stream's work so far: the
//     kernels that wrote its inputs and, through the compute stream, every operation the
//     compute stream was made to wait for;
//   - after a blocking operation the compute stream waits for it (the kernels after the call
//     read what it wrote); after a started one (start_all_reduce) only once wait() is called;
//   - nothing else: an operation never waits for another communicator's operation except
//     through the compute stream.
// So an operation of communicator X waits for exactly (a) what the MPI backend's blocking
// semantics put before it: the blocking operations issued before it and the started ones
// waited for before it, and (b) the earlier operations of X. Then every program the MPI
// backend completes completes here too, given the one extra requirement below and NCCL
// kernels of different communicators that can all be resident at once (their CTAs bounded
// by nccl_cta_limit). docs/design.md §4 has the argument.
//
// The extra requirement: a point-to-point operation (send_recv) is not issued on a
// communicator on which this rank has started an all-reduce that it has not waited for
// (nor seen complete): the transfer would queue behind the all-reduce, which may need a peer
// that first needs this transfer. enqueue() refuses it. (Collectives may follow a started
// all-reduce: every member issues a communicator's collectives in the same order.)
//
// Why that completes what the MPI backend completes. Run the program with the MPI backend:
// each rank's part n of an operation is issued at T(n), and the operation completes at C(n),
// when the last of its parts is issued. Measure a part of a collective by C, a part of a
// transfer by T. Suppose some part o never starts on the GPU: something it waits for, d,
// never completes, so some part n of d (d itself or a peer's part) never starts. Either d is
// one the MPI backend completes before issuing o (blocking, or waited for): then n was issued
// before d completed, before o was issued, and n measures less than o. Or d is the
// operation before o on o's communicator, an all-reduce started and not waited for: then o
// is a collective too (the extra requirement), each member issued d before o (one order of
// collectives), so C(d) < C(o), and n measures C(d). Either way n measures less than o; no
// finite program has an endless descent, so every part starts, and with all kernels
// resident, completes. A host blocked in a synchronization or an MPI call on host tensors
// waits only for operations the MPI backend completes before it goes on: the first case.
//
// One DeviceOrder per GPU, shared by the communicators on it. Not thread-safe: a process
// drives its communicators from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gridnn::parallel {

// How the host issues an operation: a blocking call, or start_all_reduce (waited for later).
enum class Issue { blocking, started };
// What it moves: a collective of all members, or a point-to-point transfer (send_recv).
enum class Transfer { collective, point_to_point };

// The grid's communicators one rank may hold as NCCL communicators: world, stage, row, col,
// pipe (docs/design.md §4).
constexpr int kCommunicatorsPerRank = 5;

// The most CTAs (thread blocks) one NCCL kernel may use on a GPU of `multiprocessors` SMs
// when a rank holds `communicators` NCCL communicators: the largest power of two, at most
// 32, such that `communicators` kernels of that many CTAs fill at most three quarters of the
// SMs; at least 1. One kernel of every communicator then fits on the GPU at once, with a
// quarter of the SMs left to compute. H200 (132 SMs): 16, so 5 x 16 = 80 CTAs and at least
// 52 SMs for compute. A power of two because NCCL rounds its point-to-point channels up to
// one.
int nccl_cta_limit(int multiprocessors, int communicators = kCommunicatorsPerRank);

class DeviceOrder {
 public:
  // An operation: the index-th (0, 1, ...) enqueued on communicator comm's stream.
  struct Op {
    int comm = -1;
    int64_t index = -1;
  };

  // What a newly enqueued operation waits for, and what waits for it.
  struct Plan {
    Op op;
    // It waits for the first after[c] operations of each communicator c (a stream is in
    // order, so a prefix says it all): for its own communicator all earlier ones (after[comm]
    // == index, its stream's order); for the others those the compute stream has waited for
    // (its stream waits for the compute stream's work so far).
    std::vector<int64_t> after;
    // The compute stream waits for it right after it (blocking operations); a started one is
    // waited for by wait().
    bool compute_waits = false;
  };

  // A communicator on this GPU; returns its number. `name` is for messages.
  int add_communicator(std::string name);
  // It is gone (destroyed); its number is not reused.
  void remove_communicator(int comm);
  // Communicators added and not removed.
  int communicators() const;

  // Enqueues operation `op` ("all_reduce", "send_recv", ...) of communicator `comm`; an
  // Error for a point-to-point transfer behind a started all-reduce not yet waited for.
  Plan enqueue(int comm, Issue issue, Transfer transfer, const std::string& op);
  // wait() of a started operation: true when the compute stream must now wait for it, false
  // when it already waits for it (or a later operation of its communicator).
  bool wait(Op op);
  // test() saw a started operation complete.
  void completed(Op op);

  // The operations the compute stream has waited for so far, as after[] above: the first
  // [c] of each communicator c. A host synchronization of the compute stream waits for them.
  std::vector<int64_t> compute_waited() const;
  // Started operations of `comm` neither waited for nor seen complete, oldest first.
  std::vector<Op> pending_started(int comm) const;
  const std::string& name(int comm) const;

 private:
  struct Comm {
    std::string name;
    bool open = true;
    int64_t issued = 0;                                    // operations enqueued
    int64_t compute_waited = 0;                            // the compute stream waits for the first this many
    int64_t known_done = 0;                                // the first this many are waited for or seen complete
    std::vector<std::pair<int64_t, std::string>> started;  // started operations, by index
  };
  Comm& at(int comm, const char* what);
  const Comm& at(int comm, const char* what) const;

  std::vector<Comm> comms_;
};

}  // namespace gridnn::parallel
