#include "parallel/process_grid.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/test_switches.h"
#include "parallel/nccl_loopback.h"

#if GRIDNN_HAVE_MPI
#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#include "parallel/slurm.h"
#endif
#if GRIDNN_HAVE_CUDA
#include "core/cuda_context.h"
#endif
#if GRIDNN_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace gridnn::parallel {

GridShape GridShape::parse(const std::string& text) {
  auto bad = [&] {
    return Error("grid \"" + text + "\" is not PrxPc or PsxPrxPc with positive integers (e.g. 2x2, 4x1 or 2x1x2)");
  };
  std::vector<int> parts;
  size_t i = 0;
  while (true) {
    size_t begin = i;
    long long v = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      v = v * 10 + (text[i] - '0');
      if (v > 1000000) throw bad();
      ++i;
    }
    if (i == begin || v < 1) throw bad();
    parts.push_back(int(v));
    if (i == text.size()) break;
    if (text[i] != 'x' || parts.size() == 3) throw bad();
    ++i;
  }
  if (parts.size() < 2) throw bad();
  GridShape g;
  if (parts.size() == 3) g.stages = parts[0];
  g.rows = parts[parts.size() - 2];
  g.cols = parts[parts.size() - 1];
  return g;
}

std::string GridShape::str() const {
  std::string rc = std::to_string(rows) + "x" + std::to_string(cols);
  return stages > 1 ? std::to_string(stages) + "x" + rc : rc;
}

Range balanced_range(int64_t n, int parts, int i) {
  GRIDNN_REQUIRE(n >= 0 && parts >= 1 && i >= 0 && i < parts, "balanced_range: part ", i, " of ", parts, " of ", n,
                 " items is not defined");
  int64_t base = n / parts, extra = n % parts;
  Range r;
  r.begin = i * base + std::min<int64_t>(i, extra);
  r.end = r.begin + base + (i < extra ? 1 : 0);
  return r;
}

int64_t min_over_world(int64_t value) {
#if GRIDNN_HAVE_MPI
  int initialized = 0;
  GRIDNN_CHECK_MPI(MPI_Initialized(&initialized));
  if (initialized) GRIDNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
#endif
  return value;
}

int ranks_sharing_device([[maybe_unused]] const Device& device) {
#if GRIDNN_HAVE_MPI
  int initialized = 0;
  GRIDNN_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) return 1;
  // The memory's identity: the GPU's UUID, or all zeros for the host's.
  std::array<unsigned char, 16> id{};
#if GRIDNN_HAVE_CUDA
  if (device.is_cuda() && !device.is_standin()) {
    const cudaUUID_t uuid = cuda::context(device.index).properties.uuid;
    static_assert(sizeof uuid == sizeof id, "a CUDA UUID is 16 bytes");
    std::memcpy(id.data(), &uuid, sizeof id);
  }
#endif
  MPI_Comm node = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int n = 1;
  GRIDNN_CHECK_MPI(MPI_Comm_size(node, &n));
  std::vector<std::array<unsigned char, 16>> all(static_cast<size_t>(n));
  GRIDNN_CHECK_MPI(MPI_Allgather(id.data(), int(id.size()), MPI_BYTE, all.data(), int(id.size()), MPI_BYTE, node));
  GRIDNN_CHECK_MPI(MPI_Comm_free(&node));
  return int(std::count(all.begin(), all.end(), id));
#else
  return 1;
#endif
}

// The two orders differ only in which of r and c counts fastest within a stage (stages are
// outermost in both): w = (s * slow_count + slow) * fast_count + fast.
namespace {
struct Digits {
  int fast_count, slow_count;
};
Digits digits(const GridShape& shape, RankOrder order) {
  return order == RankOrder::rows_in_node ? Digits{shape.rows, shape.cols} : Digits{shape.cols, shape.rows};
}
}  // namespace

int ProcessGrid::world_rank_of(const GridShape& shape, int s, int r, int c, RankOrder order) {
  const Digits d = digits(shape, order);
  const bool rows_fast = order == RankOrder::rows_in_node;
  return (s * d.slow_count + (rows_fast ? c : r)) * d.fast_count + (rows_fast ? r : c);
}

GridPosition ProcessGrid::position_of(const GridShape& shape, int world_rank, RankOrder order) {
  GRIDNN_REQUIRE(world_rank >= 0 && world_rank < shape.size(), "grid ", shape.str(), ": world rank ", world_rank,
                 " is outside [0, ", shape.size(), ")");
  const Digits d = digits(shape, order);
  const int fast = world_rank % d.fast_count, slow = (world_rank / d.fast_count) % d.slow_count;
  const bool rows_fast = order == RankOrder::rows_in_node;
  GridPosition p;
  p.stage = world_rank / (d.fast_count * d.slow_count);
  p.row = rows_fast ? fast : slow;
  p.col = rows_fast ? slow : fast;
  return p;
}

std::string ProcessGrid::describe_placement(const std::vector<int>& node_of_rank) const {
  GRIDNN_REQUIRE(int(node_of_rank.size()) == shape_.size(), "describe_placement: ", node_of_rank.size(),
                 " node ids for a grid of ", shape_.size(), " ranks");
  auto node = [&](int s, int r, int c) { return node_of_rank[size_t(world_rank_of(shape_, s, r, c, order_))]; };
  // A kind of group stays in a node when every group of that kind does.
  bool rows_inside = true, cols_inside = true;
  for (int s = 0; s < shape_.stages; ++s)
    for (int r = 0; r < shape_.rows; ++r)
      for (int c = 0; c < shape_.cols; ++c) {
        rows_inside = rows_inside && node(s, r, c) == node(s, 0, c);
        cols_inside = cols_inside && node(s, r, c) == node(s, r, 0);
      }
  std::string text = std::string("rank order ") + enum_name(order_) +
                     ": row groups (model/domain traffic, "
                     "every layer) " +
                     (rows_inside ? "inside a node" : "CROSS nodes") +
                     "; column groups (gradient all-reduce, once per step) " +
                     (cols_inside ? "inside a node" : "cross nodes");
  std::vector<std::string> labels(size_t(shape_.size()));  // by world rank
  for (int s = 0; s < shape_.stages; ++s)
    for (int r = 0; r < shape_.rows; ++r)
      for (int c = 0; c < shape_.cols; ++c)
        labels[size_t(world_rank_of(shape_, s, r, c, order_))] = "(" +
                                                                 (shape_.stages > 1 ? std::to_string(s) + "," : "") +
                                                                 std::to_string(r) + "," + std::to_string(c) + ")";
  std::vector<std::string> per_node;
  for (size_t w = 0; w < labels.size(); ++w) {
    const size_t n = size_t(node_of_rank[w]);
    if (per_node.size() <= n) per_node.resize(n + 1);
    per_node[n] += " " + std::to_string(w) + "=" + labels[w];
  }
  text += "\nrank=(" + std::string(shape_.stages > 1 ? "stage," : "") + "row,col) by node:";
  for (size_t n = 0; n < per_node.size(); ++n)
    if (!per_node[n].empty()) text += "\n  node " + std::to_string(n) + ":" + per_node[n];
  return text;
}

namespace {

// The backend a grid on `device` uses when `asked` (see CommBackend). `multi_process`: MPI
// runs, so ranks may share a GPU (collective over MPI_COMM_WORLD then).
CommBackend resolve_backend(CommBackend asked, const Device& device, bool multi_process) {
  if (asked == CommBackend::mpi) return CommBackend::mpi;
  const bool required = asked == CommBackend::nccl;
  // The test switch asks for NCCL between GPU ranks: where there can be none, the run says
  // so rather than test the MPI backend in its name.
  const bool loopback = multi_process && device.is_cuda() && test_switches().nccl_loopback;
  if (device.is_standin()) {  // host memory (core/device.h): MPI stages it as it would a GPU's
    GRIDNN_REQUIRE(!required && !loopback, "communication backend nccl needs a real GPU; ", device.str(),
                   " is the device stand-in (GRIDNN_DEVICE_STANDIN=1)",
                   loopback ? "; GRIDNN_TEST_NCCL_LOOPBACK=1 runs NCCL between ranks on a real GPU only" : "");
    return CommBackend::mpi;
  }
#if GRIDNN_HAVE_NCCL
  if (!device.is_cuda()) {
    GRIDNN_REQUIRE(!required,
                   "communication backend nccl needs a CUDA device (--device cuda), but the ranks "
                   "compute on ",
                   device.str(), "; use the mpi backend for host tensors");
    return CommBackend::mpi;
  }
  require_device(device);
#if GRIDNN_HAVE_MPI
  // Whether two ranks of one node compute on the same GPU, on any node.
  if (multi_process && -min_over_world(-ranks_sharing_device(device)) > 1) {
    if (loopback) {  // the test switch: each rank a host of its own, over loopback sockets
      int rank = 0;
      GRIDNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
      set_nccl_loopback_environment(rank);
      return CommBackend::nccl;
    }
    GRIDNN_REQUIRE(!required,
                   "communication backend nccl: two ranks of one node compute on the same GPU, "
                   "which NCCL does not allow; give each rank its own GPU (cuda:<rank on the node>) or use "
                   "the mpi backend, which stages device tensors through pinned host memory");
    return CommBackend::mpi;
  }
#else
  (void)multi_process;
#endif
  return CommBackend::nccl;
#else
  GRIDNN_REQUIRE(!required && !loopback,
                 "communication backend nccl: gridnn was built without NCCL (it needs "
                 "-DGRIDNN_CUDA=ON and NCCL 2 found at configure; set NCCL_ROOT); ",
                 loopback ? "unset GRIDNN_TEST_NCCL_LOOPBACK" : "use the mpi or auto backend");
  return CommBackend::mpi;
#endif
}

}  // namespace

std::unique_ptr<ProcessGrid> ProcessGrid::single() {
  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->row_ = make_self_communicator("row");
  g->col_ = make_self_communicator("col");
  g->stage_ = make_self_communicator("stage");
  g->pipe_ = make_self_communicator("pipe");
  g->world_ = make_self_communicator("world");
  return g;
}

std::unique_ptr<ProcessGrid> ProcessGrid::planned(const GridShape& shape, int stage, int row, int col,
                                                  RankOrder order) {
  GRIDNN_REQUIRE(shape.stages >= 1 && shape.rows >= 1 && shape.cols >= 1 && stage >= 0 && stage < shape.stages &&
                     row >= 0 && row < shape.rows && col >= 0 && col < shape.cols,
                 "planned grid ", shape.str(), ": position (", stage, ", ", row, ", ", col, ") is outside it");
  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->shape_ = shape;
  g->s_ = stage;
  g->r_ = row;
  g->c_ = col;
  g->order_ = order;
  g->world_rank_ = world_rank_of(shape, stage, row, col, order);
  g->row_ = make_planning_communicator("row", row, shape.rows);
  g->col_ = make_planning_communicator("col", col, shape.cols);
  g->stage_ = make_planning_communicator("stage", world_rank_of(shape, 0, row, col, order), shape.rows * shape.cols);
  g->pipe_ = make_planning_communicator("pipe", stage, shape.stages);
  g->world_ = make_planning_communicator("world", g->world_rank_, shape.size());
  return g;
}

std::unique_ptr<ProcessGrid> ProcessGrid::create(const GridShape& shape, CommBackend backend, const Device& device,
                                                 RankOrder order) {
  GRIDNN_REQUIRE(shape.stages >= 1 && shape.rows >= 1 && shape.cols >= 1, "--grid ", shape.str(),
                 ": every dimension must be at least 1");
  // One process without MPI: self communicators (nothing to communicate), or, when the NCCL
  // backend is asked for by name, NCCL groups of one rank (a unique id made here), so device
  // tensors take the NCCL path (the GPU check runs it so).
  auto one_process = [&]() {
    std::unique_ptr<ProcessGrid> g = single();
    g->order_ = order;  // a grid of one: either order places it alike
#if GRIDNN_HAVE_NCCL
    if (backend == CommBackend::nccl && resolve_backend(backend, device, false) == CommBackend::nccl) {
      g->backend_ = CommBackend::nccl;
      for (auto* c : {&g->row_, &g->col_, &g->stage_, &g->pipe_, &g->world_}) {
        const std::string name = (*c)->name();
        *c = make_nccl_communicator(make_nccl_unique_id(), 0, 1, device.index, name, nullptr);
      }
    }
#else
    resolve_backend(backend, device, false);  // explains why nccl is impossible, if asked for
#endif
    return g;
  };
#if GRIDNN_HAVE_MPI
  int initialized = 0;
  GRIDNN_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    GRIDNN_REQUIRE(shape.size() == 1, "--grid ", shape.str(), " needs ", shape.size(),
                   " processes, but MPI is not running (start the program through MpiSession and mpiexec -n ",
                   shape.size(), ")");
    return one_process();
  }
  int world_rank = 0, world_size = 1;
  GRIDNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  GRIDNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  // Every rank sees the same sizes: the job ends with status 1 on every rank, no abort.
  if (world_size != shape.size())
    throw AllRanksError(detail::concat("--grid ", shape.str(), " needs ", shape.size(), " processes, the job has ",
                                       world_size, "; ", job_size_advice(shape.size(), world_size)));

  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->shape_ = shape;
  g->world_rank_ = world_rank;
  g->backend_ = resolve_backend(backend, device, true);
  g->order_ = order;
  const GridPosition place = position_of(shape, world_rank, order);
  g->s_ = place.stage;
  g->r_ = place.row;
  g->c_ = place.col;

  // Every communicator is an MPI one; with NCCL, an NCCL one wrapping it (nccl_communicator.h).
  auto make = [&](MPI_Comm comm, const char* name) -> std::unique_ptr<Communicator> {
#if GRIDNN_HAVE_NCCL
    if (g->backend_ == CommBackend::nccl) {
      // A group of one moves nothing between GPUs: no NCCL communicator (its memory and
      // setup) for it.
      int size = 0;
      GRIDNN_CHECK_MPI(MPI_Comm_size(comm, &size));
      if (size == 1) {
        GRIDNN_CHECK_MPI(MPI_Comm_free(&comm));
        return make_self_communicator(name);
      }
      return make_nccl_communicator(comm, name, device.index);
    }
#endif
    return make_mpi_communicator(comm, name);
  };
  // World first: it is the largest, so the polite-wait detection sees every rank of the node.
  MPI_Comm world = MPI_COMM_NULL, stage = MPI_COMM_NULL, row = MPI_COMM_NULL, col = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  g->world_ = make(world, "world");
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->s_, world_rank, &stage));
  g->stage_ = make(stage, "stage");
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->s_ * shape.cols + g->c_, g->r_, &row));
  g->row_ = make(row, "row");
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->s_ * shape.rows + g->r_, g->c_, &col));
  g->col_ = make(col, "col");
  MPI_Comm pipe = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->c_ * shape.rows + g->r_, g->s_, &pipe));
  g->pipe_ = make(pipe, "pipe");
  return g;
#else
  GRIDNN_REQUIRE(shape.size() == 1, "--grid ", shape.str(), " needs ", shape.size(),
                 " processes, but gridnn was built without MPI (GRIDNN_MPI=OFF); use --grid 1x1 or "
                 "rebuild with MPI");
  return one_process();
#endif
}

}  // namespace gridnn::parallel
