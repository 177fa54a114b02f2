// The NCCL backend: device tensors through NCCL on the communicator's own stream, ordered
// against the compute stream by events; host tensors through the wrapped communicator (see
// nccl_communicator.h for the why).
#include "parallel/nccl_communicator.h"

#include <chrono>
#include <exception>
#include <initializer_list>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/stream.h"
#include "parallel/comm_detail.h"
#include "parallel/nccl_check.h"
#include "parallel/progress_board.h"

#if GRIDNN_HAVE_MPI
#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_session.h"
#endif

namespace gridnn::parallel {

ncclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  GRIDNN_CHECK_NCCL(ncclGetUniqueId(&id));
  return id;
}

namespace {

using namespace detail;

// Reductions: the dtypes check_reducible admits. Everything else moves as bytes (ncclUint8).
ncclDataType_t nccl_reduce_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: throw_unsupported_dtype("NCCL reduction", dtype, "f32, i32 or i64");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

// The last NCCL operation enqueued on each device, whichever communicator it belonged to.
// NCCL operations of different communicators (row, col, stage, pipe) must not run at the same
// time on one GPU: their kernels wait for their peers, and when they cannot all be resident
// at once ranks can deadlock each other (NCCL's documentation on concurrent communicators).
// So each one waits for the previous one on its device; they still overlap computation.
// Never freed: CUDA may be torn down before static destructors run.
cuda::Event& last_nccl_operation(int device) {
  static auto* events = new std::map<int, std::unique_ptr<cuda::Event>>();
  std::unique_ptr<cuda::Event>& e = (*events)[device];
  if (!e) e = std::make_unique<cuda::Event>(device);
  return *e;
}

// The NCCL watchdog: the time limit of parallel/progress_board.h for device tensors. NCCL
// operations are waited for by CUDA (the compute stream waits on them, and the host then
// synchronizes somewhere else, e.g. reading the loss), so no wait of this file could time
// out; instead a thread looks, every 100 ms, at each operation enqueued: done (its event has
// completed) or still under way. One under way longer than comm_timeout(), or a
// communicator that reports an asynchronous error, is aborted (ncclCommAbort, which frees
// the GPU's kernels waiting for peers) and the job ends with a message naming the operation,
// communicator, layer and step. As PyTorch's NCCL watchdog does.
class NcclWatchdog {
 public:
  // Watches the operation just enqueued on `stream` (an event is recorded after it).
  void watch(ncclComm_t comm, int device, cudaStream_t stream, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_started_) {
      std::thread([this] { loop(); }).detach();  // lives as long as the process (never joined)
      thread_started_ = true;
    }
    cudaEvent_t event = nullptr;
    if (!free_events_[device].empty()) {
      event = free_events_[device].back();
      free_events_[device].pop_back();
    } else {
      GRIDNN_CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    GRIDNN_CHECK_CUDA(cudaEventRecord(event, stream));
    pending_.push_back({comm, device, event, Clock::now(), std::move(what), g_watch_step()});
  }

  // Stops watching `comm` (it is about to be destroyed or aborted).
  void forget(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->comm == comm) {
        free_events_[it->device].push_back(it->event);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  struct Pending {
    ncclComm_t comm;
    int device;
    cudaEvent_t event;
    Clock::time_point start;
    std::string what;
    int64_t step;
  };

  static int64_t g_watch_step() { return progress_step(); }

  void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(mutex_);
      const double limit = comm_timeout();
      for (auto it = pending_.begin(); it != pending_.end();) {
        cudaSetDevice(it->device);
        const cudaError_t state = cudaEventQuery(it->event);
        if (state == cudaSuccess) {
          free_events_[it->device].push_back(it->event);
          it = pending_.erase(it);
          continue;
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(it->comm, &async);
        const double waited = std::chrono::duration<double>(Clock::now() - it->start).count();
        if (async != ncclSuccess && async != ncclInProgress)
          fail(*it, std::string("NCCL reports an error: ") + ncclGetErrorString(async));
        if (state != cudaErrorNotReady)
          fail(*it, std::string("CUDA reports an error: ") + cudaGetErrorString(state));
        if (limit > 0 && waited > limit)
          fail(*it, "not complete after " + std::to_string(int(waited)) + " s (--comm-timeout " +
                        std::to_string(int(limit)) + "): a peer is stopped, dead or far behind");
        ++it;
      }
    }
  }

  [[noreturn]] static void fail(const Pending& p, const std::string& why) {
    ncclCommAbort(p.comm);
    const std::string message = "NCCL communication timeout or failure: " + p.what + ", step " +
                                std::to_string(p.step) + ": " + why +
                                ". Ending the job; raise --comm-timeout if a step can legitimately take this long";
#if GRIDNN_HAVE_MPI
    MpiSession::fail_job(message, kCommTimeoutExitCode);
#else
    std::fprintf(stderr, "gridnn: error: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(kCommTimeoutExitCode);
#endif
  }

  std::mutex mutex_;
  bool thread_started_ = false;
  std::list<Pending> pending_;
  std::map<int, std::vector<cudaEvent_t>> free_events_;  // by device, reused
};

// Never destroyed: its thread may still run while static destructors do.
NcclWatchdog& nccl_watchdog() {
  static auto* watchdog = new NcclWatchdog();
  return *watchdog;
}

char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw()); }
const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.raw()); }

class NcclAllReduce;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device, const std::string& name,
                   std::unique_ptr<Communicator> host)
      : Communicator(name, rank, size),
        device_(device),
        host_(host ? std::move(host) : size == 1 ? make_self_communicator(name) : nullptr),
        stream_(device),
        compute_ready_(device),
        comm_done_(device) {
    if (host_)
      GRIDNN_REQUIRE(host_->size() == size && host_->rank() == rank, "NCCL communicator \"", name, "\": rank ",
                     rank, " of ", size, ", but its host communicator \"", host_->name(), "\" is rank ",
                     host_->rank(), " of ", host_->size(), "; they must be the same group in the same order");
    cuda::context(device_);  // makes the device current: NCCL binds the communicator to it
    GRIDNN_CHECK_NCCL(ncclCommInitRank(&comm_, size, id, rank));
  }

  ~NcclCommunicator() override {
    if (!comm_) return;
    nccl_watchdog().forget(comm_);
    if (failed_ || std::uncaught_exceptions() > 0) {
      // A peer may never arrive: do not wait for the operations under way.
      ncclCommAbort(comm_);
      return;
    }
    cudaStreamSynchronize(stream_.handle());  // enqueued operations finish with their communicator
    ncclCommDestroy(comm_);
  }

  void all_reduce(Tensor& t, ReduceOp op) override {
    const auto start = Clock::now();
    check_defined(*this, "all_reduce", t, "t");
    check_reducible(*this, "all_reduce", t.dtype());
    if (!on_device("all_reduce", {&t})) return host("all_reduce").all_reduce(t, op);
    enqueue("all_reduce", [&](cudaStream_t s) {
      if (t.numel() > 0)
        GRIDNN_CHECK_NCCL(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_reduce_type(t.dtype()),
                                        nccl_op(op), comm_, s));
    });
    record(*this, "all_reduce", t.numel(), t.dtype(), start);
  }

  std::unique_ptr<PendingAllReduce> start_all_reduce(Tensor& t, ReduceOp op) override;

  void all_gather(const Tensor& in, Tensor& out) override {
    const auto start = Clock::now();
    check_defined(*this, "all_gather", in, "in");
    check_blocks(*this, "all_gather", in, "in", out, "out", even_rows(*this, in.rank() ? in.size(0) : 0));
    if (!on_device("all_gather", {&in, &out})) return host("all_gather").all_gather(in, out);
    // In place when `in` is this rank's block of `out`; any other overlap goes through a copy.
    const Tensor src = unaliased(in, out, bytes_of(out) + size_t(rank()) * in.nbytes());
    enqueue("all_gather", [&](cudaStream_t s) {
      if (src.nbytes() > 0)
        GRIDNN_CHECK_NCCL(ncclAllGather(src.raw(), out.raw(), src.nbytes(), ncclUint8, comm_, s));
    });
    record(*this, "all_gather", in.numel(), in.dtype(), start);
  }

  void all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    const auto start = Clock::now();
    check_rows(*this, "all_gatherv", rows);
    check_blocks(*this, "all_gatherv", in, "in", out, "out", rows);
    if (!on_device("all_gatherv", {&in, &out})) return host("all_gatherv").all_gatherv(in, out, rows);
    const std::vector<size_t> offsets = block_offsets(rows, size_t(row_bytes(in)));
    const Tensor src = unaliased(in, out, bytes_of(out) + offsets[size_t(rank())]);
    // One broadcast per rank's block, from that rank into its place in every `out`.
    enqueue("all_gatherv", [&](cudaStream_t s) {
      grouped([&] {
        for (int i = 0; i < size(); ++i) {
          const size_t n = offsets[size_t(i) + 1] - offsets[size_t(i)];
          char* dst = bytes_of(out) + offsets[size_t(i)];
          if (n > 0)
            GRIDNN_CHECK_NCCL(ncclBroadcast(i == rank() ? src.raw() : dst, dst, n, ncclUint8, i, comm_, s));
        }
      });
    });
    record(*this, "all_gatherv", in.numel(), in.dtype(), start);
  }

  void reduce_scatter(const Tensor& in, Tensor& out) override {
    const auto start = Clock::now();
    check_defined(*this, "reduce_scatter", out, "out");
    check_blocks(*this, "reduce_scatter", out, "out", in, "in", even_rows(*this, out.rank() ? out.size(0) : 0));
    check_reducible(*this, "reduce_scatter", in.dtype());
    if (!on_device("reduce_scatter", {&in, &out})) return host("reduce_scatter").reduce_scatter(in, out);
    // In place when `out` is this rank's block of `in`; any other overlap goes through a copy.
    const bool in_place = out.raw() == bytes_of(in) + size_t(rank()) * out.nbytes();
    const Tensor src = in.shares_storage_with(out) && !in_place ? in.clone() : in;
    enqueue("reduce_scatter", [&](cudaStream_t s) {
      if (out.numel() > 0)
        GRIDNN_CHECK_NCCL(ncclReduceScatter(src.raw(), out.raw(), size_t(out.numel()),
                                            nccl_reduce_type(in.dtype()), ncclSum, comm_, s));
    });
    record(*this, "reduce_scatter", in.numel(), in.dtype(), start);
  }

  void reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    const auto start = Clock::now();
    check_rows(*this, "reduce_scatterv", rows);
    check_blocks(*this, "reduce_scatterv", out, "out", in, "in", rows);
    check_reducible(*this, "reduce_scatterv", in.dtype());
    if (!on_device("reduce_scatterv", {&in, &out}))
      return host("reduce_scatterv").reduce_scatterv(in, out, rows);
    const size_t es = dtype_size(in.dtype());
    const std::vector<size_t> offsets = block_offsets(rows, size_t(row_bytes(in)));
    const Tensor src = in.shares_storage_with(out) ? in.clone() : in;
    // One reduction per rank's block, onto that rank's `out`, in one group.
    enqueue("reduce_scatterv", [&](cudaStream_t s) {
      grouped([&] {
        for (int i = 0; i < size(); ++i) {
          const size_t n = offsets[size_t(i) + 1] - offsets[size_t(i)];
          if (n > 0)
            GRIDNN_CHECK_NCCL(ncclReduce(bytes_of(src) + offsets[size_t(i)], i == rank() ? out.raw() : nullptr,
                                         n / es, nccl_reduce_type(in.dtype()), ncclSum, i, comm_, s));
        }
      });
    });
    record(*this, "reduce_scatterv", in.numel(), in.dtype(), start);
  }

  void broadcast(Tensor& t, int root) override {
    const auto start = Clock::now();
    check_defined(*this, "broadcast", t, "t");
    check_rank(*this, "broadcast", root, "root", false);
    if (!on_device("broadcast", {&t})) return host("broadcast").broadcast(t, root);
    enqueue("broadcast", [&](cudaStream_t s) {
      if (t.nbytes() > 0) GRIDNN_CHECK_NCCL(ncclBroadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, comm_, s));
    });
    record(*this, "broadcast", t.numel(), t.dtype(), start);
  }

  void send_recv(const Tensor& send, int dest, Tensor& recv, int source, int tag) override {
    const auto start = Clock::now();
    const bool sends = dest != -1 && send.defined();
    const bool receives = source != -1 && recv.defined();
    if (sends) check_rank(*this, "send_recv", dest, "destination", true);
    if (receives) check_rank(*this, "send_recv", source, "source", true);
    GRIDNN_REQUIRE(tag >= 0, where(*this, "send_recv"), ": tag ", tag, " is negative");
    if (!sends && !receives) {  // nothing to move, on either backend
      record(*this, "send_recv", 0, DType::f32, start);
      return;
    }
    if (!on_device("send_recv", {sends ? &send : nullptr, receives ? &recv : nullptr}))
      return host("send_recv").send_recv(send, dest, recv, source, tag);
    const Tensor src = sends && receives && send.shares_storage_with(recv) ? send.clone() : send;
    enqueue("send_recv", [&](cudaStream_t s) {
      grouped([&] {
        if (receives && recv.nbytes() > 0)
          GRIDNN_CHECK_NCCL(ncclRecv(recv.raw(), recv.nbytes(), ncclUint8, source, comm_, s));
        if (sends && src.nbytes() > 0)
          GRIDNN_CHECK_NCCL(ncclSend(src.raw(), src.nbytes(), ncclUint8, dest, comm_, s));
      });
    });
    record(*this, "send_recv", sends ? send.numel() : 0, sends ? send.dtype() : DType::f32, start,
           receives ? recv.numel() : 0);
  }

  void barrier() override {
    if (host_) return host_->barrier();
    // No host communicator: a one-element all-reduce through NCCL, waited for on the host.
    const auto start = Clock::now();
    if (!token_.defined()) token_ = Tensor::zeros({1}, DType::i32, Device::cuda(device_));
    enqueue("barrier", [&](cudaStream_t s) {
      GRIDNN_CHECK_NCCL(ncclAllReduce(token_.raw(), token_.raw(), 1, ncclInt32, ncclSum, comm_, s));
    });
    stream_.synchronize();
    record(*this, "barrier", 0, DType::f32, start);
  }

 private:
  friend class NcclAllReduce;

  // True when the call's tensors are on this communicator's device, false when on the host
  // (null entries are sides a send_recv skips); an error for another device or a mix.
  bool on_device(const char* op, std::initializer_list<const Tensor*> tensors) const {
    bool host_side = false, device_side = false;
    for (const Tensor* t : tensors) {
      if (!t || !t->defined()) continue;
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
    return device_side;
  }

  Communicator& host(const char* op) {
    GRIDNN_REQUIRE(host_ != nullptr, where(*this, op), ": host tensors need a host communicator, and this NCCL "
                   "communicator was made without one; move the tensors to cuda:", device_,
                   " or make it over MPI (make_nccl_communicator(MPI_Comm, ...))");
    return *host_;
  }

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

  // Queues `body(nccl_stream)` after the work already on the compute stream. Without `done`,
  // the compute stream then waits for it (a blocking call's semantics, without blocking the
  // host); with `done`, the event is recorded after it and nothing waits (start_all_reduce).
  template <class F>
  void enqueue(const char* op, F&& body, cuda::Event* done = nullptr) {
    cudaStream_t compute = cuda::context(device_).stream;  // (also makes the device current)
    compute_ready_.record(compute);
    compute_ready_.wait(stream_);
    cuda::Event& previous = last_nccl_operation(device_);
    previous.wait(stream_);  // one NCCL operation at a time on this GPU (see above)
    try {
      body(stream_.handle());
    } catch (const NcclError&) {
      failed_ = true;
      throw;
    }
    previous.record(stream_);
    nccl_watchdog().watch(comm_, device_, stream_.handle(),
                          std::string(op) + " on NCCL communicator \"" + name() + "\" (rank " +
                              std::to_string(rank()) + " of " + std::to_string(size()) + "), layer \"" +
                              CommLayerScope::current() + "\"");
    if (done) {
      done->record(stream_);
      return;
    }
    comm_done_.record(stream_);
    comm_done_.wait(compute);
  }

  // Throws when NCCL reports an asynchronous failure (a peer died, a network error).
  void check_async_error() {
    ncclResult_t state = ncclSuccess;
    GRIDNN_CHECK_NCCL(ncclCommGetAsyncError(comm_, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      failed_ = true;
      throw NcclError("ncclCommGetAsyncError(communicator \"" + name() + "\")",
                      gridnn::detail::nccl_error_string(state), __FILE__, __LINE__);
    }
  }

  int device_;
  std::unique_ptr<Communicator> host_;  // host tensors and barrier(); may be null (header)
  cuda::Stream stream_;                 // NCCL's stream
  cuda::Event compute_ready_;           // recorded on the compute stream before each operation
  cuda::Event comm_done_;               // recorded on stream_ after each blocking operation
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;                 // an NCCL call failed: abort, do not destroy
  Tensor token_;                        // barrier() without a host communicator
};

// One start_all_reduce on device memory: ncclAllReduce enqueued on the NCCL stream after the
// compute stream's work so far, and an event recorded after it. test() asks the event;
// wait() makes the compute stream wait on it (the host does not block: the host reads t
// through to_host, which synchronizes the compute stream).
class NcclAllReduce final : public PendingAllReduce {
 public:
  NcclAllReduce(NcclCommunicator& comm, Tensor& t, ReduceOp op)
      : comm_(comm), t_(t), done_(comm.device_), layer_(CommLayerScope::current()) {
    const auto start = Clock::now();
    comm.enqueue("all_reduce", [&](cudaStream_t s) {
          if (t.numel() > 0)
            GRIDNN_CHECK_NCCL(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_reduce_type(t.dtype()),
                                            nccl_op(op), comm.comm_, s));
        },
        &done_);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
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
    const auto start = Clock::now();
    const bool done = done_.query();
    if (!done) comm_.check_async_error();
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    if (done) complete();
    return done;
  }

  void wait() override {
    if (completed_) return;
    const auto start = Clock::now();
    if (!done_.query()) comm_.check_async_error();  // a failed peer: an error, not a stalled stream
    done_.wait(cuda::context(comm_.device_).stream);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    complete();
  }

 private:
  void complete() {
    completed_ = true;
    record_seconds(comm_, "all_reduce", t_.numel(), t_.dtype(), seconds_, layer_);
  }

  NcclCommunicator& comm_;
  Tensor t_;
  cuda::Event done_;  // recorded on the NCCL stream after the all-reduce
  std::string layer_;
  double seconds_ = 0;
  bool completed_ = false;
};

std::unique_ptr<PendingAllReduce> NcclCommunicator::start_all_reduce(Tensor& t, ReduceOp op) {
  check_defined(*this, "all_reduce", t, "t");
  check_reducible(*this, "all_reduce", t.dtype());
  if (!on_device("all_reduce", {&t})) return host("all_reduce").start_all_reduce(t, op);
  return std::make_unique<NcclAllReduce>(*this, t, op);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const ncclUniqueId& id, int rank, int size, int device,
                                                     std::string name, std::unique_ptr<Communicator> host) {
  GRIDNN_REQUIRE(size >= 1 && rank >= 0 && rank < size, "make_nccl_communicator(\"", name, "\"): rank ", rank,
                 " of ", size, " is not a rank of the group");
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
  GRIDNN_REQUIRE(message.made == 1, "make_nccl_communicator(\"", name, "\"): rank 0 could not make the NCCL "
                 "unique id", failure.empty() ? std::string() : ": " + failure);
  const ncclUniqueId& id = message.id;
  const int rank = host->rank(), size = host->size();
  return make_nccl_communicator(id, rank, size, device, std::move(name), std::move(host));
}
#endif

}  // namespace gridnn::parallel
