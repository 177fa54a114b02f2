// The process grid of DESIGN §4: P = Ps x Pr x Pc ranks. World rank w = (s * Pc + c) * Pr + r:
// the Pr ranks of one model/domain group are consecutive (one node). Per stage:
//   row  (size Pr): ranks sharing batch shard c; model- and domain-split traffic
//   col  (size Pc): ranks holding model shard r on different batch shards; weight gradients
//   stage (Pr * Pc): everything replicated on the stage (convolution, batch-norm gradients)
//   world (P)
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace gridnn::dist {

struct GridShape {
  int stages = 1;  // Ps
  int rows = 1;    // Pr: model / domain parallel
  int cols = 1;    // Pc: batch parallel
  int size() const { return stages * rows * cols; }
  // "2x4" (Pr x Pc) or "2x2x4" (Ps x Pr x Pc); gridnn::Error saying the format otherwise.
  static GridShape parse(const std::string& text);
  std::string str() const;  // "2x4", or "2x2x4" with stages
};

class ProcessGrid {
 public:
  // The grid over every process of the job (MPI_COMM_WORLD); throws gridnn::Error when the
  // job's size is not shape.size() ("--grid 2x2 needs 4 processes, the job has 3: ...").
  // Without MPI only the 1x1 grid exists.
  static std::unique_ptr<ProcessGrid> create(const GridShape& shape);
  // One process, no MPI calls.
  static std::unique_ptr<ProcessGrid> single();

  const GridShape& shape() const { return shape_; }
  int stage() const { return s_; }
  int row_rank() const { return r_; }  // r: position in the model/domain group (row comm rank)
  int col_rank() const { return c_; }  // c: the batch shard (col comm rank)
  int world_rank() const { return world_rank_; }

  Communicator& row() { return *row_; }
  Communicator& col() { return *col_; }
  Communicator& stage_comm() { return *stage_; }
  Communicator& world() { return *world_; }

  // World rank of grid position (s, r, c).
  static int world_rank_of(const GridShape& shape, int s, int r, int c) {
    return (s * shape.cols + c) * shape.rows + r;
  }

 private:
  ProcessGrid() = default;
  GridShape shape_;
  int s_ = 0, r_ = 0, c_ = 0, world_rank_ = 0;
  std::unique_ptr<Communicator> row_, col_, stage_, world_;
};

// [begin, end) of part i when n items are split into `parts` balanced parts (the first
// n % parts parts one larger).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range balanced_range(int64_t n, int parts, int i);

}  // namespace gridnn::dist
