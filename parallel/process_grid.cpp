#include "parallel/process_grid.h"

#include <cctype>
#include <vector>

#include "core/error.h"

#if GRIDNN_HAVE_MPI
#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#endif

namespace gridnn::dist {

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
  GRIDNN_REQUIRE(n >= 0 && parts >= 1 && i >= 0 && i < parts, "balanced_range: part ", i, " of ", parts,
                 " of ", n, " items is not defined");
  int64_t base = n / parts, extra = n % parts;
  Range r;
  r.begin = i * base + std::min<int64_t>(i, extra);
  r.end = r.begin + base + (i < extra ? 1 : 0);
  return r;
}

std::unique_ptr<ProcessGrid> ProcessGrid::single() {
  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->row_ = make_self_communicator("row");
  g->col_ = make_self_communicator("col");
  g->stage_ = make_self_communicator("stage");
  g->world_ = make_self_communicator("world");
  return g;
}

std::unique_ptr<ProcessGrid> ProcessGrid::create(const GridShape& shape) {
  GRIDNN_REQUIRE(shape.stages >= 1 && shape.rows >= 1 && shape.cols >= 1, "--grid ", shape.str(),
                 ": every dimension must be at least 1");
#if GRIDNN_HAVE_MPI
  int initialized = 0;
  GRIDNN_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    GRIDNN_REQUIRE(shape.size() == 1, "--grid ", shape.str(), " needs ", shape.size(),
                   " processes, but MPI is not running (start the program through MpiSession and mpiexec -n ",
                   shape.size(), ")");
    return single();
  }
  int world_rank = 0, world_size = 1;
  GRIDNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  GRIDNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  GRIDNN_REQUIRE(world_size == shape.size(), "--grid ", shape.str(), " needs ", shape.size(),
                 " processes, the job has ", world_size, "; start mpiexec -n ", shape.size(),
                 " or change --grid");

  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->shape_ = shape;
  g->world_rank_ = world_rank;
  // w = (s * Pc + c) * Pr + r
  g->r_ = world_rank % shape.rows;
  g->c_ = (world_rank / shape.rows) % shape.cols;
  g->s_ = world_rank / (shape.rows * shape.cols);

  // World first: it is the largest, so the polite-wait detection sees every rank of the node.
  MPI_Comm world = MPI_COMM_NULL, stage = MPI_COMM_NULL, row = MPI_COMM_NULL, col = MPI_COMM_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  g->world_ = make_mpi_communicator(world, "world");
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->s_, world_rank, &stage));
  g->stage_ = make_mpi_communicator(stage, "stage");
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->s_ * shape.cols + g->c_, g->r_, &row));
  g->row_ = make_mpi_communicator(row, "row");
  GRIDNN_CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, g->s_ * shape.rows + g->r_, g->c_, &col));
  g->col_ = make_mpi_communicator(col, "col");
  return g;
#else
  GRIDNN_REQUIRE(shape.size() == 1, "--grid ", shape.str(), " needs ", shape.size(),
                 " processes, but gridnn was built without MPI (GRIDNN_MPI=OFF); use --grid 1x1 or "
                 "rebuild with MPI");
  return single();
#endif
}

}  // namespace gridnn::dist
