// The self communicator (a group of one), the communication log and the layer scope, plus
// the argument checks and the fixed-order reduction that every backend shares.
#include "parallel/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "parallel/comm_detail.h"

namespace gridnn::parallel {

// ---- shared checks ----------------------------------------------------------------------

namespace detail {

std::string where(const Communicator& comm, const char* op) {
  return gridnn::detail::concat(op, " on communicator \"", comm.name(), "\" (rank ", comm.rank(), " of ",
                                comm.size(), ")");
}

void check_defined(const Communicator& comm, const char* op, const Tensor& t, const char* what) {
  GRIDNN_REQUIRE(t.defined(), where(comm, op), ": `", what, "` is an undefined tensor");
}

void check_reducible(const Communicator& comm, const char* op, DType dtype) {
  GRIDNN_REQUIRE(dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64, where(comm, op),
                 ": cannot reduce ", dtype_name(dtype), " tensors; reductions support f32, i32 and i64 "
                 "(cast to f32 first)");
}

std::vector<int64_t> even_rows(const Communicator& comm, int64_t rows_per_rank) {
  return std::vector<int64_t>(size_t(comm.size()), rows_per_rank);
}

void check_rows(const Communicator& comm, const char* op, const std::vector<int64_t>& rows) {
  GRIDNN_REQUIRE(int(rows.size()) == comm.size(), where(comm, op), ": `rows` has ", rows.size(),
                 " entries, one per rank needs ", comm.size());
  for (size_t i = 0; i < rows.size(); ++i)
    GRIDNN_REQUIRE(rows[i] >= 0, where(comm, op), ": rows[", i, "] = ", rows[i], " is negative");
}

void check_blocks(const Communicator& comm, const char* op, const Tensor& part, const char* part_name,
                  const Tensor& whole, const char* whole_name, const std::vector<int64_t>& rows) {
  check_defined(comm, op, part, part_name);
  check_defined(comm, op, whole, whole_name);
  GRIDNN_REQUIRE(part.dtype() == whole.dtype(), where(comm, op), ": `", part_name, "` is ", part.str(),
                 " but `", whole_name, "` is ", whole.str(), "; the dtypes must match");
  GRIDNN_REQUIRE(part.rank() >= 1 && part.rank() == whole.rank(), where(comm, op), ": `", part_name,
                 "` ", part.str(), " and `", whole_name, "` ", whole.str(),
                 " need the same number of dimensions (at least one)");
  for (int d = 1; d < part.rank(); ++d)
    GRIDNN_REQUIRE(part.size(d) == whole.size(d), where(comm, op), ": `", part_name, "` ", part.str(),
                   " and `", whole_name, "` ", whole.str(), " differ in dimension ", d,
                   "; only dimension 0 is split over the ranks");
  int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t(0));
  GRIDNN_REQUIRE(part.size(0) == rows[size_t(comm.rank())], where(comm, op), ": `", part_name, "` ",
                 part.str(), " must have ", rows[size_t(comm.rank())], " rows (this rank's share)");
  GRIDNN_REQUIRE(whole.size(0) == total, where(comm, op), ": `", whole_name, "` ", whole.str(),
                 " must have ", total, " rows (the sum over the ", comm.size(), " ranks)");
}

void check_rank(const Communicator& comm, const char* op, int rank, const char* role, bool allow_none) {
  if (allow_none && rank == -1) return;
  GRIDNN_REQUIRE(rank >= 0 && rank < comm.size(), where(comm, op), ": ", role, " rank ", rank,
                 " is outside the group [0, ", comm.size(), ")", allow_none ? " (or -1 for none)" : "");
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
    case DType::f32: return combine_typed(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case DType::i32:
      return combine_typed(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case DType::i64:
      return combine_typed(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    default: throw_unsupported_dtype("combine", dtype, "f32, i32 or i64");
  }
}

void record(const Communicator& comm, const char* op, int64_t elements, DType dtype, Clock::time_point start,
            int64_t received) {
  record_seconds(comm, op, elements, dtype, std::chrono::duration<double>(Clock::now() - start).count(),
                 CommLayerScope::current(), received);
}

void record_seconds(const Communicator& comm, const char* op, int64_t elements, DType dtype, double seconds,
                    const std::string& layer, int64_t received) {
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

}  // namespace detail

// ---- the default non-blocking all_reduce: blocking, complete at once ----------------------

namespace {
class CompletedAllReduce final : public PendingAllReduce {
 public:
  bool test() override { return true; }
  void wait() override {}
};
}  // namespace

std::unique_ptr<PendingAllReduce> Communicator::start_all_reduce(Tensor& t, ReduceOp op) {
  all_reduce(t, op);
  return std::make_unique<CompletedAllReduce>();
}

namespace detail {

}  // namespace detail

// ---- the self communicator ----------------------------------------------------------------

namespace {

using namespace detail;

// Copies src into dst unless they are the very same elements.
void copy_unless_same(Tensor& dst, const Tensor& src) {
  if (dst.shares_storage_with(src) && dst.raw() == src.raw()) return;
  dst.copy_from(src);
}

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : Communicator(std::move(name), 0, 1) {}

  void all_reduce(Tensor& t, ReduceOp) override {
    auto start = Clock::now();
    check_defined(*this, "all_reduce", t, "t");
    check_reducible(*this, "all_reduce", t.dtype());
    record(*this, "all_reduce", t.numel(), t.dtype(), start);
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    auto start = Clock::now();
    check_defined(*this, "all_gather", in, "in");
    check_blocks(*this, "all_gather", in, "in", out, "out", even_rows(*this, in.rank() ? in.size(0) : 0));
    copy_unless_same(out, in);
    record(*this, "all_gather", in.numel(), in.dtype(), start);
  }
  void all_gatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    auto start = Clock::now();
    check_rows(*this, "all_gatherv", rows);
    check_blocks(*this, "all_gatherv", in, "in", out, "out", rows);
    copy_unless_same(out, in);
    record(*this, "all_gatherv", in.numel(), in.dtype(), start);
  }
  void reduce_scatter(const Tensor& in, Tensor& out) override {
    auto start = Clock::now();
    check_defined(*this, "reduce_scatter", out, "out");
    check_blocks(*this, "reduce_scatter", out, "out", in, "in", even_rows(*this, out.rank() ? out.size(0) : 0));
    check_reducible(*this, "reduce_scatter", in.dtype());
    copy_unless_same(out, in);
    record(*this, "reduce_scatter", in.numel(), in.dtype(), start);
  }
  void reduce_scatterv(const Tensor& in, Tensor& out, const std::vector<int64_t>& rows) override {
    auto start = Clock::now();
    check_rows(*this, "reduce_scatterv", rows);
    check_blocks(*this, "reduce_scatterv", out, "out", in, "in", rows);
    check_reducible(*this, "reduce_scatterv", in.dtype());
    copy_unless_same(out, in);
    record(*this, "reduce_scatterv", in.numel(), in.dtype(), start);
  }
  void broadcast(Tensor& t, int root) override {
    auto start = Clock::now();
    check_defined(*this, "broadcast", t, "t");
    check_rank(*this, "broadcast", root, "root", false);
    record(*this, "broadcast", t.numel(), t.dtype(), start);
  }
  void send_recv(const Tensor& send, int dest, Tensor& recv, int source, int) override {
    auto start = Clock::now();
    bool sends = dest != -1 && send.defined(), receives = source != -1 && recv.defined();
    if (sends) check_rank(*this, "send_recv", dest, "destination", true);
    if (receives) check_rank(*this, "send_recv", source, "source", true);
    GRIDNN_REQUIRE(sends == receives, where(*this, "send_recv"),
                   ": a group of one can only send to itself while it receives from itself");
    if (sends) {
      GRIDNN_REQUIRE(send.shape() == recv.shape() && send.dtype() == recv.dtype(), where(*this, "send_recv"),
                     ": sent ", send.str(), " does not match `recv` ", recv.str());
      copy_unless_same(recv, send);
    }
    record(*this, "send_recv", sends ? send.numel() : 0, sends ? send.dtype() : DType::f32, start,
           receives ? recv.numel() : 0);
  }
  void barrier() override { record(*this, "barrier", 0, DType::f32, Clock::now()); }
};

// A rank's place in a group that does not run: layers are built on it to describe what
// they would communicate (the cost model), and any data it was asked to move is a bug.
class PlanningCommunicator final : public Communicator {
 public:
  PlanningCommunicator(std::string name, int rank, int size) : Communicator(std::move(name), rank, size) {}
  void all_reduce(Tensor&, ReduceOp) override { refuse("all_reduce"); }
  void all_gather(const Tensor&, Tensor&) override { refuse("all_gather"); }
  void all_gatherv(const Tensor&, Tensor&, const std::vector<int64_t>&) override { refuse("all_gatherv"); }
  void reduce_scatter(const Tensor&, Tensor&) override { refuse("reduce_scatter"); }
  void reduce_scatterv(const Tensor&, Tensor&, const std::vector<int64_t>&) override { refuse("reduce_scatterv"); }
  void broadcast(Tensor&, int) override { refuse("broadcast"); }
  void send_recv(const Tensor&, int, Tensor&, int, int) override { refuse("send_recv"); }
  void barrier() override { refuse("barrier"); }

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

void CommLog::add(CommRecord record) { records_.push_back(std::move(record)); }

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
  auto line = [&](const std::string& layer, const std::string& comm, const std::string& op,
                  const std::string& calls, const std::string& elements, const std::string& mb,
                  const std::string& seconds) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-*s  %-*s  %-*s  %7s  %13s  %10s  %9s\n", int(w_layer), layer.c_str(),
                  int(w_comm), comm.c_str(), int(w_op), op.c_str(), calls.c_str(), elements.c_str(), mb.c_str(),
                  seconds.c_str());
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
