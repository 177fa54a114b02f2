// The Communicator calls (their argument rules, timing and record), the self and planning
// communicators, the communication log and the layer scope, plus what the backends share
// (comm_detail.h).
#include "parallel/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "parallel/comm_detail.h"

namespace gridnn::parallel {

// ---- shared by the backends ----------------------------------------------------------------

namespace detail {

std::string where(const Communicator& comm, const char* op) {
  return gridnn::detail::concat(op, " on communicator \"", comm.name(), "\" (rank ", comm.rank(), " of ", comm.size(),
                                ")");
}

std::vector<int64_t> even_rows(const Communicator& comm, int64_t rows_per_rank) {
  return std::vector<int64_t>(size_t(comm.size()), rows_per_rank);
}

int64_t row_bytes(const Tensor& t) {
  int64_t n = int64_t(dtype_size(t.dtype()));
  for (int d = 1; d < t.rank(); ++d) n *= t.size(d);
  return n;
}

namespace {
template <class T>
void combine_typed(T* acc, const T* x, int64_t n, ReduceOp op) {
  if (op == ReduceOp::sum) {
    if constexpr (std::is_integral_v<T>) {  // wraps like the hardware, no signed-overflow UB
      using U = std::make_unsigned_t<T>;
      for (int64_t i = 0; i < n; ++i) acc[i] = T(U(acc[i]) + U(x[i]));
    } else {
      for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      if (x[i] > acc[i] || x[i] != x[i]) acc[i] = x[i];  // a NaN wins, as in MPI_MAX on floats
  }
}
}  // namespace

void combine(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return combine_typed(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case DType::i32:
      return combine_typed(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case DType::i64:
      return combine_typed(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    default:
      throw_unsupported_dtype("combine", dtype, "f32, i32 or i64");
  }
}

}  // namespace detail

// ---- the argument rules -----------------------------------------------------------------------

namespace {

using detail::where;
using Clock = std::chrono::steady_clock;

void check_defined(const Communicator& comm, const char* op, const Tensor& t, const char* what) {
  GRIDNN_REQUIRE(t.defined(), where(comm, op), ": `", what, "` is an undefined tensor");
}

// Reductions support f32, i32 and i64 (gridnn has no f64); gathers, broadcasts and
// send_recv move any dtype byte for byte.
void check_reducible(const Communicator& comm, const char* op, DType dtype) {
  GRIDNN_REQUIRE(dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64, where(comm, op), ": cannot reduce ",
                 dtype_name(dtype),
                 " tensors; reductions support f32, i32 and i64 "
                 "(cast to f32 first)");
}

// The v-variants' `rows`: one entry per rank, none negative.
void check_rows(const Communicator& comm, const char* op, const std::vector<int64_t>& rows) {
  GRIDNN_REQUIRE(int(rows.size()) == comm.size(), where(comm, op), ": `rows` has ", rows.size(),
                 " entries, one per rank needs ", comm.size());
  for (size_t i = 0; i < rows.size(); ++i)
    GRIDNN_REQUIRE(rows[i] >= 0, where(comm, op), ": rows[", i, "] = ", rows[i], " is negative");
}

// `part` holds rows[rank()] rows and `whole` their sum, same dtype and trailing dimensions.
// `part_name` / `whole_name` are "in" / "out" for gathers, "out" / "in" for scatters.
void check_blocks(const Communicator& comm, const char* op, const Tensor& part, const char* part_name,
                  const Tensor& whole, const char* whole_name, const std::vector<int64_t>& rows) {
  check_defined(comm, op, part, part_name);
  check_defined(comm, op, whole, whole_name);
  GRIDNN_REQUIRE(part.dtype() == whole.dtype(), where(comm, op), ": `", part_name, "` is ", part.str(), " but `",
                 whole_name, "` is ", whole.str(), "; the dtypes must match");
  GRIDNN_REQUIRE(part.rank() >= 1 && part.rank() == whole.rank(), where(comm, op), ": `", part_name, "` ", part.str(),
                 " and `", whole_name, "` ", whole.str(), " need the same number of dimensions (at least one)");
  for (int d = 1; d < part.rank(); ++d)
    GRIDNN_REQUIRE(part.size(d) == whole.size(d), where(comm, op), ": `", part_name, "` ", part.str(), " and `",
                   whole_name, "` ", whole.str(), " differ in dimension ", d,
                   "; only dimension 0 is split over the ranks");
  int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t(0));
  GRIDNN_REQUIRE(part.size(0) == rows[size_t(comm.rank())], where(comm, op), ": `", part_name, "` ", part.str(),
                 " must have ", rows[size_t(comm.rank())], " rows (this rank's share)");
  GRIDNN_REQUIRE(whole.size(0) == total, where(comm, op), ": `", whole_name, "` ", whole.str(), " must have ", total,
                 " rows (the sum over the ", comm.size(), " ranks)");
}

// The even split of all_gather and reduce_scatter: every rank's `part` has its rows.
void check_even_blocks(const Communicator& comm, const char* op, const Tensor& part, const char* part_name,
                       const Tensor& whole, const char* whole_name) {
  check_defined(comm, op, part, part_name);
  check_blocks(comm, op, part, part_name, whole, whole_name, detail::even_rows(comm, part.rank() ? part.size(0) : 0));
}

void check_rank(const Communicator& comm, const char* op, int rank, const char* role, bool allow_none) {
  if (allow_none && rank == -1) return;
  GRIDNN_REQUIRE(rank >= 0 && rank < comm.size(), where(comm, op), ": ", role, " rank ", rank,
                 " is outside the group [0, ", comm.size(), ")", allow_none ? " (or -1 for none)" : "");
}

// ---- the record of each call ----------------------------------------------------------------

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// `elements` of `dtype` as CommRecord counts them; `received`: send_recv's elements received.
void record(const Communicator& comm, const char* op, int64_t elements, DType dtype, double seconds,
            const std::string& layer, int64_t received = 0) {
  CommRecord r;
  r.comm = comm.name();
  r.op = op;
  r.layer = layer;
  r.elements = elements;
  r.bytes = elements * int64_t(dtype_size(dtype));
  r.seconds = seconds;
  r.received = received;
  comm_log().add(std::move(r));
}

// A call that began at `start`, under the current layer.
void record(const Communicator& comm, const char* op, int64_t elements, DType dtype, Clock::time_point start,
            int64_t received = 0) {
  record(comm, op, elements, dtype, seconds_since(start), CommLayerScope::current(), received);
}

// A backend's started call, timed inside start, test and wait and recorded once complete (its
// destruction waits for it, as PendingCall says, unless an exception unwinds: then the
// backend's call decides, and a call that would need the other ranks to wait with it is
// abandoned, since they may be waiting for this rank, which ends the job).
class RecordedCall final : public PendingCall {
 public:
  RecordedCall(const Communicator& comm, const char* op, std::unique_ptr<PendingCall> started, int64_t elements,
               DType dtype, int64_t received, double seconds, std::string layer)
      : comm_(comm),
        op_(op),
        started_(std::move(started)),
        elements_(elements),
        dtype_(dtype),
        received_(received),
        seconds_(seconds),
        layer_(std::move(layer)) {}

  ~RecordedCall() override {
    if (recorded_ || std::uncaught_exceptions() > 0) return;
    try {
      wait();
    } catch (...) {  // the backend failed: nothing left to do but forget it
    }
  }

  bool test() override {
    if (recorded_) return true;
    const auto start = Clock::now();
    const bool done = started_->test();
    seconds_ += seconds_since(start);
    if (done) complete();
    return done;
  }

  void wait() override {
    if (recorded_) return;
    const auto start = Clock::now();
    started_->wait();
    seconds_ += seconds_since(start);
    complete();
  }

 private:
  void complete() {
    recorded_ = true;
    record(comm_, op_, elements_, dtype_, seconds_, layer_, received_);
  }

  const Communicator& comm_;
  const char* op_;
  std::unique_ptr<PendingCall> started_;
  int64_t elements_;
  DType dtype_;
  int64_t received_;
  double seconds_;
  std::string layer_;
  bool recorded_ = false;
};

class CompletedCall final : public PendingCall {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

// ---- the calls: check, carry out, record ------------------------------------------------------

Communicator* Communicator::carrier(std::initializer_list<const Tensor*>, const char*) { return nullptr; }

void Communicator::all_reduce(Tensor& t, ReduceOp op) {
  const auto start = Clock::now();
  check_defined(*this, "all_reduce", t, "t");
  check_reducible(*this, "all_reduce", t.dtype());
  if (Communicator* other = carrier({&t}, "all_reduce")) return other->all_reduce(t, op);
  do_all_reduce(t, op);
  record(*this, "all_reduce", t.numel(), t.dtype(), start);
}

std::unique_ptr<PendingCall> Communicator::start_all_reduce(Tensor& t, ReduceOp op) {
  const auto start = Clock::now();
  std::string layer = CommLayerScope::current();
  check_defined(*this, "all_reduce", t, "t");
  check_reducible(*this, "all_reduce", t.dtype());
  if (Communicator* other = carrier({&t}, "all_reduce")) return other->start_all_reduce(t, op);
  std::unique_ptr<PendingCall> started = do_start_all_reduce(t, op);
  if (started)
    return std::make_unique<RecordedCall>(*this, "all_reduce", std::move(started), t.numel(), t.dtype(), 0,
                                          seconds_since(start), std::move(layer));
  record(*this, "all_reduce", t.numel(), t.dtype(), seconds_since(start), layer);
  return std::make_unique<CompletedCall>();
}

std::unique_ptr<PendingCall> Communicator::do_start_all_reduce(Tensor& t, ReduceOp op) {
  do_all_reduce(t, op);
  return nullptr;
}

void Communicator::all_gather(const Tensor& in, Tensor& out) {
  const auto start = Clock::now();
  check_even_blocks(*this, "all_gather", in, "in", out, "out");
  if (Communicator* other = carrier({&in, &out}, "all_gather")) return other->all_gather(in, out);
  do_all_gather(in, out);
  record(*this, "all_gather", in.numel(), in.dtype(), start);
}

void Communicator::all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) {
  const auto start = Clock::now();
  check_rows(*this, "all_gatherv", rows);
  check_blocks(*this, "all_gatherv", in, "in", out, "out", rows);
  if (Communicator* other = carrier({&in, &out}, "all_gatherv")) return other->all_gatherv(in, out, rows);
  do_all_gatherv(in, out, rows);
  record(*this, "all_gatherv", in.numel(), in.dtype(), start);
}

void Communicator::reduce_scatter(const Tensor& in, Tensor& out) {
  const auto start = Clock::now();
  check_even_blocks(*this, "reduce_scatter", out, "out", in, "in");
  check_reducible(*this, "reduce_scatter", in.dtype());
  if (Communicator* other = carrier({&in, &out}, "reduce_scatter")) return other->reduce_scatter(in, out);
  do_reduce_scatter(in, out);
  record(*this, "reduce_scatter", in.numel(), in.dtype(), start);
}

void Communicator::reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) {
  const auto start = Clock::now();
  check_rows(*this, "reduce_scatterv", rows);
  check_blocks(*this, "reduce_scatterv", out, "out", in, "in", rows);
  check_reducible(*this, "reduce_scatterv", in.dtype());
  if (Communicator* other = carrier({&in, &out}, "reduce_scatterv")) return other->reduce_scatterv(in, out, rows);
  do_reduce_scatterv(in, out, rows);
  record(*this, "reduce_scatterv", in.numel(), in.dtype(), start);
}

void Communicator::broadcast(Tensor& t, int root) {
  const auto start = Clock::now();
  check_defined(*this, "broadcast", t, "t");
  check_rank(*this, "broadcast", root, "root", false);
  if (Communicator* other = carrier({&t}, "broadcast")) return other->broadcast(t, root);
  do_broadcast(t, root);
  record(*this, "broadcast", t.numel(), t.dtype(), start);
}

void Communicator::send_recv(const Tensor& send, int dest, Tensor& recv, int source, int tag) {
  start_send_recv(send, dest, recv, source, tag)->wait();
}

std::unique_ptr<PendingCall> Communicator::start_send_recv(const Tensor& send, int dest, Tensor& recv, int source,
                                                           int tag) {
  const auto start = Clock::now();
  std::string layer = CommLayerScope::current();
  const Tensor* sent = dest != -1 && send.defined() ? &send : nullptr;
  Tensor* received = source != -1 && recv.defined() ? &recv : nullptr;
  if (sent) check_rank(*this, "send_recv", dest, "destination", true);
  if (received) check_rank(*this, "send_recv", source, "source", true);
  GRIDNN_REQUIRE(tag >= 0 && tag <= max_tag_, where(*this, "send_recv"), ": tag ", tag, " is outside [0, ", max_tag_,
                 "]");
  if (Communicator* other = carrier({sent, received}, "send_recv"))
    return other->start_send_recv(send, dest, recv, source, tag);
  std::unique_ptr<PendingCall> started = do_start_send_recv(sent, dest, received, source, tag);
  const int64_t elements = sent ? send.numel() : 0, got = received ? recv.numel() : 0;
  const DType dtype = sent ? send.dtype() : DType::f32;
  if (started)
    return std::make_unique<RecordedCall>(*this, "send_recv", std::move(started), elements, dtype, got,
                                          seconds_since(start), std::move(layer));
  record(*this, "send_recv", elements, dtype, seconds_since(start), layer, got);
  return std::make_unique<CompletedCall>();
}

std::unique_ptr<PendingCall> Communicator::do_start_send_recv(const Tensor* send, int dest, Tensor* recv, int source,
                                                              int tag) {
  do_send_recv(send, dest, recv, source, tag);
  return nullptr;
}

void Communicator::barrier() {
  const auto start = Clock::now();
  if (Communicator* other = carrier({}, "barrier")) return other->barrier();
  do_barrier();
  record(*this, "barrier", 0, DType::f32, start);
}

// ---- the self communicator ----------------------------------------------------------------

namespace {

// Copies src into dst unless they are the very same elements.
void copy_unless_same(Tensor& dst, const Tensor& src) {
  if (dst.shares_storage_with(src) && dst.raw() == src.raw()) return;
  dst.copy_from(src);
}

// A group of one: the checks have made sure every block is the whole.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : Communicator(std::move(name), 0, 1) {}

 protected:
  void do_all_reduce(Tensor&, ReduceOp) override {}
  void do_all_gather(const Tensor& in, Tensor& out) override { copy_unless_same(out, in); }
  void do_all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>&) override {
    copy_unless_same(out, in);
  }
  void do_reduce_scatter(const Tensor& in, Tensor& out) override { copy_unless_same(out, in); }
  void do_reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>&) override {
    copy_unless_same(out, in);
  }
  void do_broadcast(Tensor&, int) override {}
  void do_send_recv(const Tensor* send, int, Tensor* recv, int, int) override {
    GRIDNN_REQUIRE((send != nullptr) == (recv != nullptr), where(*this, "send_recv"),
                   ": a group of one can only send to itself while it receives from itself");
    if (!send) return;
    GRIDNN_REQUIRE(send->shape() == recv->shape() && send->dtype() == recv->dtype(), where(*this, "send_recv"),
                   ": sent ", send->str(), " does not match `recv` ", recv->str());
    copy_unless_same(*recv, *send);
  }
  void do_barrier() override {}
};

// A rank's place in a group that does not run: layers are built on it to describe what
// they would communicate (the cost model), and any data it was asked to move is a bug.
class PlanningCommunicator final : public Communicator {
 public:
  PlanningCommunicator(std::string name, int rank, int size) : Communicator(std::move(name), rank, size) {}

 protected:
  void do_all_reduce(Tensor&, ReduceOp) override { refuse("all_reduce"); }
  void do_all_gather(const Tensor&, Tensor&) override { refuse("all_gather"); }
  void do_all_gatherv(const Tensor&, Tensor&, const std::vector<int64_t>&) override { refuse("all_gatherv"); }
  void do_reduce_scatter(const Tensor&, Tensor&) override { refuse("reduce_scatter"); }
  void do_reduce_scatterv(const Tensor&, Tensor&, const std::vector<int64_t>&) override { refuse("reduce_scatterv"); }
  void do_broadcast(Tensor&, int) override { refuse("broadcast"); }
  void do_send_recv(const Tensor*, int, Tensor*, int, int) override { refuse("send_recv"); }
  void do_barrier() override { refuse("barrier"); }

 private:
  [[noreturn]] void refuse(const char* op) const {
    throw Error(where(*this, op) + ": a planning grid describes a run and moves no data");
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

std::unique_ptr<Communicator> make_planning_communicator(const std::string& name, int rank, int size) {
  GRIDNN_REQUIRE(size >= 1 && rank >= 0 && rank < size, "planning communicator ", name, ": rank ", rank,
                 " is not one of ", size);
  return std::make_unique<PlanningCommunicator>(name, rank, size);
}

// ---- the log --------------------------------------------------------------------------------

void CommLog::add(CommRecord record) {
  const std::lock_guard<std::mutex> lock(adding_);
  records_.push_back(std::move(record));
}

void CommLog::clear() {
  const std::lock_guard<std::mutex> lock(adding_);
  records_.clear();
}

int64_t CommLog::elements(const std::string& comm, const std::string& op, const std::string& layer) const {
  int64_t n = 0;
  for (const CommRecord& r : records_)
    if ((comm.empty() || r.comm == comm) && (op.empty() || r.op == op) && (layer.empty() || r.layer == layer))
      n += r.elements;
  return n;
}

std::string CommLog::report() const {
  struct Row {
    std::string layer, comm, op;
    int64_t calls = 0, elements = 0, bytes = 0;
    double seconds = 0;
  };
  // One row per (layer, communicator, operation), in the order they first communicated
  // (the order of the forward and backward passes).
  std::vector<Row> rows;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  Row total{"total", "", "", 0, 0, 0, 0};
  for (const CommRecord& r : records_) {
    auto key = std::make_tuple(r.layer, r.comm, r.op);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, rows.size()).first;
      rows.push_back(Row{r.layer.empty() ? "(no layer)" : r.layer, r.comm, r.op, 0, 0, 0, 0});
    }
    for (Row* row : {&rows[it->second], &total}) {
      row->calls += 1;
      row->elements += r.elements;
      row->bytes += r.bytes;
      row->seconds += r.seconds;
    }
  }
  size_t w_layer = 5, w_comm = 4, w_op = 9;
  for (const Row& r : rows) {
    w_layer = std::max(w_layer, r.layer.size());
    w_comm = std::max(w_comm, r.comm.size());
    w_op = std::max(w_op, r.op.size());
  }
  std::ostringstream os;
  auto line = [&](const std::string& layer, const std::string& comm, const std::string& op, const std::string& calls,
                  const std::string& elements, const std::string& mb, const std::string& seconds) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-*s  %-*s  %-*s  %7s  %13s  %10s  %9s\n", int(w_layer), layer.c_str(), int(w_comm),
                  comm.c_str(), int(w_op), op.c_str(), calls.c_str(), elements.c_str(), mb.c_str(), seconds.c_str());
    os << buf;
  };
  auto fmt = [](const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return std::string(buf);
  };
  line("layer", "comm", "operation", "calls", "elements", "MB", "seconds");
  auto emit = [&](const Row& r) {
    line(r.layer, r.comm, r.op, std::to_string(r.calls), std::to_string(r.elements), fmt("%.3f", r.bytes / 1e6),
         fmt("%.4f", r.seconds));
  };
  for (const Row& r : rows) emit(r);
  emit(total);
  return os.str();
}

CommLog& comm_log() {
  static CommLog log;
  return log;
}

// ---- layer scope ----------------------------------------------------------------------------

namespace {
thread_local std::string g_current_layer;
}

CommLayerScope::CommLayerScope(std::string layer) : previous_(std::move(g_current_layer)) {
  g_current_layer = std::move(layer);
}

CommLayerScope::~CommLayerScope() { g_current_layer = std::move(previous_); }

const std::string& CommLayerScope::current() { return g_current_layer; }

}  // namespace gridnn::parallel
