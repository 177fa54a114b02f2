// The process grid of docs/design.md §4: P = Ps x Pr x Pc ranks. Per stage:
//   row  (size Pr): ranks sharing batch shard c; model- and domain-split traffic
//   col  (size Pc): ranks holding model shard r on different batch shards; weight gradients
//   stage (Pr * Pc): everything replicated on the stage (convolution, batch-norm gradients)
//   pipe  (size Ps): the ranks at the same (r, c) of every stage, rank s; pipeline
//         activations and their gradients cross stages on it (models/run/pipelined_model.h)
//   world (P)
//
// Where each grid position runs (RankOrder, gridnn-train --rank-order). Launchers place
// world ranks on nodes in blocks of consecutive ranks, so the order decides which groups stay
// inside a node:
//   rows-in-node (default)  w = (s * Pc + c) * Pr + r   a row group is Pr consecutive ranks: the
//                           traffic of every layer stays in a node; the once-per-step
//                           gradient all-reduce over col crosses nodes
//   cols-in-node            w = (s * Pr + r) * Pc + c   a column group is Pc consecutive ranks
// Stages are outermost in both.
//
// Backends (docs/design.md §4): the communicators are MPI communicators (host tensors directly,
// device tensors staged through pinned host memory), or NCCL communicators that carry device
// tensors through NCCL and hand host tensors to an MPI communicator they wrap.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/names.h"
#include "parallel/communicator.h"

namespace gridnn::parallel {

struct GridShape {
  int stages = 1;  // Ps
  int rows = 1;    // Pr: model / domain parallel
  int cols = 1;    // Pc: batch parallel
  int size() const { return stages * rows * cols; }
  // "2x4" (Pr x Pc) or "2x2x4" (Ps x Pr x Pc); gridnn::Error saying the format otherwise.
  static GridShape parse(const std::string& text);
  std::string str() const;  // "2x4", or "2x2x4" with stages
};

enum class RankOrder { rows_in_node, cols_in_node };
inline constexpr EnumName<RankOrder> kRankOrderNames[] = {
    {RankOrder::rows_in_node, "rows-in-node", "row groups on consecutive ranks, the default"},
    {RankOrder::cols_in_node, "cols-in-node", "column groups on consecutive ranks"}};
constexpr EnumNames<RankOrder> enum_names(RankOrder) { return {"rank order", kRankOrderNames}; }

// A place in the grid: stage s, row position r (model / domain shard), column c (batch shard).
struct GridPosition {
  int stage = 0, row = 0, col = 0;
};

// Which communicators ProcessGrid::create makes.
//   automatic: NCCL when gridnn was built with NCCL, the job runs under MPI, `device` is a
//              CUDA device and no two ranks of a node use the same GPU (compared by UUID, so
//              CUDA_VISIBLE_DEVICES per rank is seen through); MPI with pinned staging
//              otherwise (self communicators for one process without MPI).
//   mpi:       MPI communicators (device tensors staged through pinned host memory).
//   nccl:      NCCL communicators; an error saying why when that is impossible (no NCCL in
//              the build, a CPU device, or ranks sharing a GPU, which NCCL refuses). One
//              process without MPI gets NCCL groups of one rank.
enum class CommBackend { automatic, mpi, nccl };
inline constexpr EnumName<CommBackend> kCommBackendNames[] = {
    {CommBackend::automatic, "auto"}, {CommBackend::mpi, "mpi"}, {CommBackend::nccl, "nccl"}};
constexpr EnumNames<CommBackend> enum_names(CommBackend) { return {"communication backend", kCommBackendNames}; }

// The smallest `value` of the job's processes, on every one (collective over MPI_COMM_WORLD,
// before any grid exists: what a program settles alike on every rank); `value` itself
// without MPI or with one process.
int64_t min_over_world(int64_t value);

// How many of this node's ranks compute in `device`'s memory, this one included: those on
// the same GPU (by UUID, so ranks that each see theirs as cuda:0 through CUDA_VISIBLE_DEVICES
// are told apart), or every rank of the node for host memory (the CPU, the device stand-in).
// Collective over MPI_COMM_WORLD; 1 without MPI or with one process.
int ranks_sharing_device(const Device& device);

class ProcessGrid {
 public:
  // The grid over every process of the job (MPI_COMM_WORLD); throws gridnn::Error when the
  // job's size is not shape.size() ("--grid 2x2 needs 4 processes, the job has 3: ...").
  // Without MPI only the 1x1 grid exists. `device` is where this rank computes (the layers'
  // tensors); `backend` picks the communicators (above). Collective over MPI_COMM_WORLD.
  // `order`: where each grid position runs (above).
  static std::unique_ptr<ProcessGrid> create(const GridShape& shape, CommBackend backend = CommBackend::automatic,
                                             const Device& device = Device::cpu(),
                                             RankOrder order = RankOrder::rows_in_node);
  // One process, no MPI calls.
  static std::unique_ptr<ProcessGrid> single();
  // The place (stage, row, col) of a grid that does not run (planning communicators): the
  // layers a run would build there describe its communication for the cost model.
  static std::unique_ptr<ProcessGrid> planned(const GridShape& shape, int stage, int row, int col,
                                              RankOrder order = RankOrder::rows_in_node);

  const GridShape& shape() const { return shape_; }
  int stage() const { return s_; }
  int row_rank() const { return r_; }  // r: position in the model/domain group (row comm rank)
  int col_rank() const { return c_; }  // c: the batch shard (col comm rank)
  int world_rank() const { return world_rank_; }
  RankOrder rank_order() const { return order_; }
  // The backend the communicators use: CommBackend::mpi or CommBackend::nccl (never
  // automatic; single() and a grid without MPI report mpi).
  CommBackend backend() const { return backend_; }

  Communicator& row() { return *row_; }
  Communicator& col() { return *col_; }
  Communicator& stage_comm() { return *stage_; }
  Communicator& pipe() { return *pipe_; }
  Communicator& world() { return *world_; }

  // The rank order (above), the one place it is worked out: the world rank of grid position
  // (s, r, c) in `order`, and the position of a world rank. A rank's place within its stage
  // (its stage communicator rank) is world_rank_of(shape, 0, r, c, order).
  static int world_rank_of(const GridShape& shape, int s, int r, int c, RankOrder order = RankOrder::rows_in_node);
  static GridPosition position_of(const GridShape& shape, int world_rank, RankOrder order = RankOrder::rows_in_node);
  // A few lines on where the grid runs: the rank order, each node's ranks and their grid
  // positions, and whether the row and column groups stay inside a node. `node_of_rank`: the
  // node of every world rank (collective: see node_ids()).
  std::string describe_placement(const std::vector<int>& node_of_rank) const;

 private:
  ProcessGrid() = default;
  GridShape shape_;
  int s_ = 0, r_ = 0, c_ = 0, world_rank_ = 0;
  CommBackend backend_ = CommBackend::mpi;
  RankOrder order_ = RankOrder::rows_in_node;
  std::unique_ptr<Communicator> row_, col_, stage_, pipe_, world_;
};

// [begin, end) of part i when n items are split into `parts` balanced parts (the first
// n % parts parts one larger).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range balanced_range(int64_t n, int parts, int i);

}  // namespace gridnn::parallel
