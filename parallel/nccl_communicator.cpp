// The NCCL backend: device tensors through NCCL on the communicator's own stream, ordered
// by the rule of parallel/device_order.h; host tensors through the wrapped communicator (see
// nccl_communicator.h for the why).
#include "parallel/nccl_communicator.h"

#include <climits>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_allocator.h"
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/stream.h"
#include "parallel/comm_detail.h"
#include "parallel/device_order.h"
#include "parallel/nccl_check.h"
#include "parallel/nccl_environment.h"
#include "parallel/nccl_watchdog.h"
#include "parallel/progress_board.h"

#if GRIDNN_HAVE_MPI
#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#endif

namespace gridnn::parallel {

ncclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  GRIDNN_CHECK_NCCL(ncclGetUniqueId(&id));
  return id;
}

namespace {

using namespace detail;

// Reductions: the dtypes Communicator reduces. Everything else moves as bytes (ncclUint8).
ncclDataType_t nccl_reduce_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    default:
      throw_unsupported_dtype("NCCL reduction", dtype, "f32, i32 or i64");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

// ---- the ordering -----------------------------------------------------------------------

// The DeviceOrder of each GPU (device_order.h), shared by the communicators on it, and the
// lock its calls take. Never freed: communicators may outlive static destruction.
std::mutex& order_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

DeviceOrder& device_order(int device) {
  static auto* orders = new std::map<int, DeviceOrder>();
  return (*orders)[device];
}

// The highest priority a stream of `device` can have: when SMs free up, the CTAs of NCCL
// kernels are preferred to queued compute blocks (a hint to CUDA's scheduler, no guarantee).
int highest_stream_priority(int device) {
  cuda::DeviceGuard guard(device);
  int least = 0, greatest = 0;
  GRIDNN_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return greatest;
}

char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw()); }
const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.raw()); }

class NcclAllReduce;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device, const std::string& name,
                   std::unique_ptr<Communicator> host)
      : Communicator(name, rank, size, host ? host->max_tag() : INT_MAX),
        device_(device),
        host_(host        ? std::move(host)
              : size == 1 ? make_self_communicator(name)
                          : nullptr),
        stream_(device, highest_stream_priority(device)),
        compute_ready_(device),
        comm_done_(device),
        barrier_begin_(device) {
    if (host_)
      GRIDNN_REQUIRE(host_->size() == size && host_->rank() == rank, "NCCL communicator \"", name, "\": rank ", rank,
                     " of ", size, ", but its host communicator \"", host_->name(), "\" is rank ", host_->rank(),
                     " of ", host_->size(), "; they must be the same group in the same order");
    check_nccl_environment();
    // Makes the device current (NCCL binds the communicator to it) and says how many SMs it has.
    const int sms = cuda::context(device_).properties.multiProcessorCount;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
    // Every kernel of this communicator uses at most nccl_cta_limit CTAs, so that a kernel of
    // each communicator this rank holds fits on the GPU at once (docs/design.md §4); no
    // thread-block clusters, which would need SMs free within one GPC (NCCL's default is 4
    // on sm90 and later).
    config.minCTAs = 1;
    config.maxCTAs = nccl_cta_limit(sms);
    config.cgaClusterSize = 0;
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    config.commName = this->name().c_str();  // NCCL keeps the pointer: the name lives as long
#endif
    GRIDNN_CHECK_NCCL(ncclCommInitRankConfig(&comm_, size, id, rank, &config));
#else
    (void)sms;
    GRIDNN_CHECK_NCCL(ncclCommInitRank(&comm_, size, id, rank));
#endif
    std::lock_guard<std::mutex> lock(order_mutex());
    order_id_ = device_order(device_).add_communicator(name);
    // (A group of one waits for no peer: a kernel of it cannot be left waiting.)
    if (size > 1 && device_order(device_).communicators() > kCommunicatorsPerRank)
      nccl_warn_once(
          "cuda:" + std::to_string(device_) + " holds " + std::to_string(device_order(device_).communicators()) +
          " NCCL communicators, more than the " + std::to_string(kCommunicatorsPerRank) +
          " their CTA limit is sized for: their kernels may not all " + "fit on the GPU at once (docs/design.md §4)");
  }

  ~NcclCommunicator() override {
    if (!comm_) return;
    {
      std::lock_guard<std::mutex> lock(order_mutex());
      device_order(device_).remove_communicator(order_id_);
    }
    if (!failed_ && std::uncaught_exceptions() == 0) {
      // Enqueued operations finish with their communicator, under the time limit: a dead
      // peer ends the job rather than hanging here.
      cudaEvent_t end = nullptr;
      try {
        end = nccl_watchdog().mark(device_, stream_.handle());
      } catch (const std::exception&) {  // CUDA failed: nothing to wait for, abort below
      }
      if (end) {
        nccl_watchdog().wait_on_host(comm_, nullptr, end,
                                     "the operations still under way on NCCL communicator \"" + name() + "\" (rank " +
                                         std::to_string(rank()) + " of " + std::to_string(size()) +
                                         ") when it is destroyed");
        nccl_watchdog().release(device_, end);
        nccl_watchdog().forget(comm_);
        ncclCommDestroy(comm_);
        return;
      }
    }
    // A peer may never arrive: do not wait for the operations under way.
    nccl_watchdog().forget(comm_);
    ncclCommAbort(comm_);
  }

 protected:
  // Host tensors (and barrier(), which has none) go to the host communicator; a send_recv that
  // skips both sides moves nothing and stays.
  Communicator* carrier(std::initializer_list<const Tensor*> tensors, const char* op) override {
    if (tensors.size() == 0) return host_.get();
    bool host_side = false, device_side = false;
    for (const Tensor* t : tensors) {
      if (!t) continue;
      if (t->device().is_cpu()) {
        host_side = true;
        continue;
      }
      GRIDNN_REQUIRE(t->device() == Device::cuda(device_), where(*this, op), ": ", t->str(),
                     " is on neither this communicator's device cuda:", device_, " nor the host");
      device_side = true;
    }
    GRIDNN_REQUIRE(!(host_side && device_side), where(*this, op),
                   ": the tensors mix host and device memory; pass them all on cuda:", device_,
                   " (NCCL) or all on the host (the host communicator)");
    if (!host_side) return nullptr;
    GRIDNN_REQUIRE(host_ != nullptr, where(*this, op),
                   ": host tensors need a host communicator, and this NCCL "
                   "communicator was made without one; move the tensors to cuda:",
                   device_, " or make it over MPI (make_nccl_communicator(MPI_Comm, ...))");
    return host_.get();
  }

  void do_all_reduce(Tensor& t, ReduceOp op) override {
    enqueue("all_reduce", [&](cudaStream_t s) {
      if (t.numel() > 0)
        GRIDNN_CHECK_NCCL(
            ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_reduce_type(t.dtype()), nccl_op(op), comm_, s));
    });
  }

  std::unique_ptr<PendingCall> do_start_all_reduce(Tensor& t, ReduceOp op) override;

  void do_all_gather(const Tensor& in, Tensor& out) override {
    // In place when `in` is this rank's block of `out`; any other overlap goes through a copy.
    const Tensor src = unaliased(in, out, bytes_of(out) + size_t(rank()) * in.nbytes());
    enqueue("all_gather", [&](cudaStream_t s) {
      if (src.nbytes() > 0) GRIDNN_CHECK_NCCL(ncclAllGather(src.raw(), out.raw(), src.nbytes(), ncclUint8, comm_, s));
    });
  }

  void do_all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    const std::vector<size_t> offsets = block_offsets(rows, size_t(row_bytes(in)));
    const Tensor src = unaliased(in, out, bytes_of(out) + offsets[size_t(rank())]);
    // One broadcast per rank's block, from that rank into its place in every `out`.
    enqueue("all_gatherv", [&](cudaStream_t s) {
      grouped([&] {
        for (int i = 0; i < size(); ++i) {
          const size_t n = offsets[size_t(i) + 1] - offsets[size_t(i)];
          char* dst = bytes_of(out) + offsets[size_t(i)];
          if (n > 0) GRIDNN_CHECK_NCCL(ncclBroadcast(i == rank() ? src.raw() : dst, dst, n, ncclUint8, i, comm_, s));
        }
      });
    });
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out) override {
    // In place when `out` is this rank's block of `in`; any other overlap goes through a copy.
    const bool in_place = out.raw() == bytes_of(in) + size_t(rank()) * out.nbytes();
    const Tensor src = in.shares_storage_with(out) && !in_place ? in.clone() : in;
    enqueue("reduce_scatter", [&](cudaStream_t s) {
      if (out.numel() > 0)
        GRIDNN_CHECK_NCCL(ncclReduceScatter(src.raw(), out.raw(), size_t(out.numel()), nccl_reduce_type(in.dtype()),
                                            ncclSum, comm_, s));
    });
  }

  void do_reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    const size_t es = dtype_size(in.dtype());
    const std::vector<size_t> offsets = block_offsets(rows, size_t(row_bytes(in)));
    const Tensor src = in.shares_storage_with(out) ? in.clone() : in;
    // One reduction per rank's block, onto that rank's `out`, in one group.
    enqueue("reduce_scatterv", [&](cudaStream_t s) {
      grouped([&] {
        for (int i = 0; i < size(); ++i) {
          const size_t n = offsets[size_t(i) + 1] - offsets[size_t(i)];
          if (n > 0)
            GRIDNN_CHECK_NCCL(ncclReduce(bytes_of(src) + offsets[size_t(i)], i == rank() ? out.raw() : nullptr, n / es,
                                         nccl_reduce_type(in.dtype()), ncclSum, i, comm_, s));
        }
      });
    });
  }

  void do_broadcast(Tensor& t, int root) override {
    enqueue("broadcast", [&](cudaStream_t s) {
      if (t.nbytes() > 0) GRIDNN_CHECK_NCCL(ncclBroadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, comm_, s));
    });
  }

  void do_send_recv(const Tensor* send, int dest, Tensor* recv, int source, int) override {
    if (!send && !recv) return;  // nothing to move
    Tensor src;                  // what is sent: a copy when it shares storage with `recv`
    if (send) src = recv && send->shares_storage_with(*recv) ? send->clone() : *send;
    enqueue(
        "send_recv",
        [&](cudaStream_t s) {
          grouped([&] {
            if (recv && recv->nbytes() > 0)
              GRIDNN_CHECK_NCCL(ncclRecv(recv->raw(), recv->nbytes(), ncclUint8, source, comm_, s));
            if (send && src.nbytes() > 0)
              GRIDNN_CHECK_NCCL(ncclSend(src.raw(), src.nbytes(), ncclUint8, dest, comm_, s));
          });
        },
        Issue::blocking, Transfer::point_to_point);
  }

  // No host communicator (carrier() takes barrier() there otherwise): a one-element
  // all-reduce through NCCL, waited for on the host under the time limit.
  void do_barrier() override {
    if (!token_.defined()) token_ = Tensor::zeros({1}, DType::i32, Device::cuda(device_));
    const Enqueued e = enqueue(
        "barrier",
        [&](cudaStream_t s) {
          GRIDNN_CHECK_NCCL(ncclAllReduce(token_.raw(), token_.raw(), 1, ncclInt32, ncclSum, comm_, s));
        },
        Issue::blocking, Transfer::collective, nullptr, &barrier_begin_);
    // comm_done_ was recorded right after it (a blocking operation).
    nccl_watchdog().wait_on_host(comm_, barrier_begin_.handle(), comm_done_.handle(), e.what);
  }

 private:
  friend class NcclAllReduce;

  // An operation enqueued: its place in the device's order and its description for
  // messages ("all_reduce on NCCL communicator \"col\" (rank 0 of 2, operation #7), layer
  // \"gradients\"").
  struct Enqueued {
    DeviceOrder::Op op;
    std::string what;
  };

  // `in` itself, or a copy of it when it overlaps `out` anywhere but at `in_place` (where
  // NCCL works in place).
  static Tensor unaliased(const Tensor& in, const Tensor& out, const void* in_place) {
    if (!in.shares_storage_with(out) || in.raw() == in_place) return in;
    return in.clone();
  }

  // Byte offsets of the ranks' blocks of `rows[i]` rows, back to back; size() + 1 entries.
  static std::vector<size_t> block_offsets(const std::vector<int64_t>& rows, size_t bytes_per_row) {
    std::vector<size_t> offsets(rows.size() + 1, 0);
    for (size_t i = 0; i < rows.size(); ++i) offsets[i + 1] = offsets[i] + size_t(rows[i]) * bytes_per_row;
    return offsets;
  }

  // NCCL calls fused into one operation (ncclGroupStart / ncclGroupEnd).
  template <class F>
  static void grouped(F&& calls) {
    GRIDNN_CHECK_NCCL(ncclGroupStart());
    try {
      calls();
    } catch (...) {
      ncclGroupEnd();  // close the group; the first error is the one reported
      throw;
    }
    GRIDNN_CHECK_NCCL(ncclGroupEnd());
  }

  std::string describe(const char* op, int64_t index, const std::string& layer) const {
    return std::string(op) + " on NCCL communicator \"" + name() + "\" (rank " + std::to_string(rank()) + " of " +
           std::to_string(size()) + ", operation #" + std::to_string(index + 1) + "), layer \"" +
           (layer.empty() ? "-" : layer) + "\"";
  }

  // Queues `body(stream_)` as the rule of parallel/device_order.h orders it: stream_ (which
  // runs this communicator's operations in order) first waits for the compute stream's work
  // so far; a blocking operation then has the compute stream wait for it (a blocking call's
  // semantics, without blocking the host); a started one records `done` after itself and
  // nothing waits for it until NcclAllReduce::wait(). No other communicator's operation is
  // waited for. `begin`, when given, is recorded just before the operation.
  template <class F>
  Enqueued enqueue(const char* op, F&& body, Issue issue = Issue::blocking, Transfer transfer = Transfer::collective,
                   cuda::Event* done = nullptr, cuda::Event* begin = nullptr) {
    cudaStream_t compute = cuda::context(device_).stream;  // (also makes the device current)
    DeviceOrder::Plan plan;
    {
      std::lock_guard<std::mutex> lock(order_mutex());
      plan = device_order(device_).enqueue(order_id_, issue, transfer, op);
    }
    Enqueued e{plan.op, describe(op, plan.op.index, CommLayerScope::current())};
    // plan.after: this communicator's earlier operations (stream_ is in order) and what the
    // compute stream has waited for, through compute_ready_.
    compute_ready_.record(compute);
    compute_ready_.wait(stream_);
    if (begin) begin->record(stream_);
    cudaEvent_t watch_begin = nccl_watchdog().mark(device_, stream_.handle());
    try {
      body(stream_.handle());
    } catch (const NcclError&) {
      failed_ = true;
      nccl_watchdog().release(device_, watch_begin);
      throw;
    }
    nccl_watchdog().watch(comm_, device_, watch_begin, stream_.handle(), e.what);
    if (done) done->record(stream_);
    if (plan.compute_waits) {
      comm_done_.record(stream_);
      comm_done_.wait(compute);
    }
    return e;
  }

  // Ends the job when NCCL reports an asynchronous failure (a peer died, a network error)
  // during operation `what`.
  void check_async_error(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
    if (asked != ncclSuccess) state = asked;
    if (state != ncclSuccess && state != ncclInProgress)
      nccl_watchdog().fail(comm_, what, progress_step(),
                           std::string("NCCL reports an error: ") + gridnn::detail::nccl_error_string(state));
  }

  int device_;
  std::unique_ptr<Communicator> host_;  // host tensors and barrier(); may be null (header)
  cuda::Stream stream_;                 // NCCL's stream: this communicator's operations, in order
  cuda::Event compute_ready_;           // recorded on the compute stream before each operation
  cuda::Event comm_done_;               // recorded on stream_ after each blocking operation
  cuda::Event barrier_begin_;           // recorded on stream_ before a barrier's all-reduce
  ncclComm_t comm_ = nullptr;
  int order_id_ = -1;    // this communicator in device_order(device_)
  bool failed_ = false;  // an NCCL call failed: abort, do not destroy
  Tensor token_;         // barrier() without a host communicator
};

// One start_all_reduce on device memory: ncclAllReduce enqueued on the communicator's stream
// after the compute stream's work so far, and an event recorded after it. test() asks the
// event; wait() makes the compute stream wait on it (the host does not block: it reads t
// through to_host, which synchronizes the compute stream, under the watchdog's limit).
// Operations of other communicators enqueued meanwhile do not wait for it (device_order.h).
class NcclAllReduce final : public PendingCall {
 public:
  NcclAllReduce(NcclCommunicator& comm, Tensor& t, ReduceOp op)
      : comm_(comm), t_(t), done_(comm.device_), in_flight_(std::make_unique<StartedCollective>(comm.device_)) {
    const NcclCommunicator::Enqueued e = comm.enqueue(
        "all_reduce",
        [&](cudaStream_t s) {
          if (t.numel() > 0)
            GRIDNN_CHECK_NCCL(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_reduce_type(t.dtype()),
                                            nccl_op(op), comm.comm_, s));
        },
        Issue::started, Transfer::collective, &done_);
    op_ = e.op;
    what_ = e.what;
  }

  ~NcclAllReduce() override {
    if (completed_) return;
    try {
      wait();
    } catch (...) {  // CUDA failed: nothing left to do but forget it
    }
  }

  bool test() override {
    if (completed_) return true;
    const bool done = done_.query();
    if (done) {
      std::lock_guard<std::mutex> lock(order_mutex());
      device_order(comm_.device_).completed(op_);
    } else {
      comm_.check_async_error(what_);
    }
    if (done) complete();
    return done;
  }

  void wait() override {
    if (completed_) return;
    if (!done_.query()) comm_.check_async_error(what_);  // a failed peer ends the job, not a stalled stream
    bool compute_waits = false;
    {
      std::lock_guard<std::mutex> lock(order_mutex());
      compute_waits = device_order(comm_.device_).wait(op_);
    }
    // Unless the compute stream already waits for a later operation of the communicator.
    if (compute_waits) done_.wait(cuda::context(comm_.device_).stream);
    complete();
  }

 private:
  void complete() {
    completed_ = true;
    in_flight_.reset();  // waited for: the device may be synchronized again
  }

  NcclCommunicator& comm_;
  Tensor t_;          // NCCL's output, held until complete
  cuda::Event done_;  // recorded on the communicator's stream after the all-reduce
  DeviceOrder::Op op_;
  std::string what_;
  bool completed_ = false;
  std::unique_ptr<StartedCollective> in_flight_;  // until waited for (core/cuda_allocator.h)
};

std::unique_ptr<PendingCall> NcclCommunicator::do_start_all_reduce(Tensor& t, ReduceOp op) {
  return std::make_unique<NcclAllReduce>(*this, t, op);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const ncclUniqueId& id, int rank, int size, int device,
                                                     std::string name, std::unique_ptr<Communicator> host) {
  GRIDNN_REQUIRE(size >= 1 && rank >= 0 && rank < size, "make_nccl_communicator(\"", name, "\"): rank ", rank, " of ",
                 size, " is not a rank of the group");
  require_device(Device::cuda(device));
  return std::make_unique<NcclCommunicator>(id, rank, size, device, name, std::move(host));
}

#if GRIDNN_HAVE_MPI
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name, int device) {
  GRIDNN_REQUIRE(comm != MPI_COMM_NULL, "make_nccl_communicator(\"", name, "\"): MPI_COMM_NULL");
  // The MPI communicator first: it checks `comm`, sets MPI_ERRORS_RETURN and takes it.
  std::unique_ptr<Communicator> host = make_mpi_communicator(comm, name);
  // Rank 0 sends the id with a flag saying whether it could make one, so that a failure
  // there is an error on every rank rather than a hang in ncclCommInitRank.
  struct {
    ncclUniqueId id;
    int made;
  } message{};
  std::string failure;
  if (host->rank() == 0) {
    try {
      message.id = make_nccl_unique_id();
      message.made = 1;
    } catch (const NcclError& e) {
      failure = e.what();
    }
  }
  GRIDNN_CHECK_MPI(MPI_Bcast(&message, int(sizeof message), MPI_BYTE, 0, comm));
  GRIDNN_REQUIRE(message.made == 1, "make_nccl_communicator(\"", name,
                 "\"): rank 0 could not make the NCCL "
                 "unique id",
                 failure.empty() ? std::string() : ": " + failure);
  const ncclUniqueId& id = message.id;
  const int rank = host->rank(), size = host->size();
  return make_nccl_communicator(id, rank, size, device, std::move(name), std::move(host));
}
#endif

}  // namespace gridnn::parallel
