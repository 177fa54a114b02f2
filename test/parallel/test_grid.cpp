// ProcessGrid under mpiexec -n 1, 2, 4 (label mpi): for every factorization Ps x Pr x Pc of
// the job's size, the rank mapping w = (s * Pc + c) * Pr + r and the row, col, stage and world
// communicators it builds; the message when --grid does not match the job; the ranks that
// share host memory.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "parallel/process_grid.h"
#include "test/support/error_message.h"
#include "test/support/mpi_main.h"

namespace gridnn::parallel {
namespace {

std::vector<GridShape> factorizations(int n) {
  std::vector<GridShape> out;
  for (int s = 1; s <= n; ++s)
    for (int r = 1; r <= n; ++r)
      if (n % (s * r) == 0) out.push_back(GridShape{s, r, n / (s * r)});
  return out;
}

// The world ranks of the members of `comm`, in comm rank order.
std::vector<int32_t> members(Communicator& comm, int world_rank) {
  Tensor mine = Tensor::from_vector<int32_t>({world_rank}, {1});
  Tensor all = Tensor::zeros({comm.size()}, DType::i32);
  comm.all_gather(mine, all);
  return all.to_vector<int32_t>();
}

TEST(ProcessGridMpi, EveryFactorizationMapsRanksAndBuildsItsCommunicators) {
  const int P = test::world_size(), w = test::world_rank();
  for (const GridShape& shape : factorizations(P)) {
    SCOPED_TRACE("grid " + shape.str());
    auto g = ProcessGrid::create(shape);
    const int Pr = shape.rows, Pc = shape.cols;
    EXPECT_EQ(g->world_rank(), w);
    EXPECT_EQ(ProcessGrid::world_rank_of(shape, g->stage(), g->row_rank(), g->col_rank()), w);
    EXPECT_EQ(g->row().size(), Pr);
    EXPECT_EQ(g->col().size(), Pc);
    EXPECT_EQ(g->stage_comm().size(), Pr * Pc);
    EXPECT_EQ(g->world().size(), P);
    EXPECT_EQ(g->row().rank(), g->row_rank());
    EXPECT_EQ(g->col().rank(), g->col_rank());
    EXPECT_EQ(g->stage_comm().rank(), w % (Pr * Pc));
    EXPECT_EQ(g->world().rank(), w);
    EXPECT_EQ(g->row().name(), "row");
    EXPECT_EQ(g->col().name(), "col");
    EXPECT_EQ(g->stage_comm().name(), "stage");
    EXPECT_EQ(g->world().name(), "world");

    const int s = g->stage(), r = g->row_rank(), c = g->col_rank();
    // Row ranks are consecutive world ranks: the Pr ranks of one batch shard.
    std::vector<int32_t> row = members(g->row(), w), col = members(g->col(), w);
    std::vector<int32_t> stage = members(g->stage_comm(), w), world = members(g->world(), w);
    for (int i = 0; i < Pr; ++i) EXPECT_EQ(row[size_t(i)], w - r + i);
    for (int i = 0; i < Pc; ++i) EXPECT_EQ(col[size_t(i)], (s * Pc + i) * Pr + r);
    for (int i = 0; i < Pr * Pc; ++i) EXPECT_EQ(stage[size_t(i)], s * Pr * Pc + i);
    for (int i = 0; i < P; ++i) EXPECT_EQ(world[size_t(i)], i);
    EXPECT_EQ(c, (w / Pr) % Pc);

    // A reduction over the column sums one model shard's batch shards.
    Tensor t = Tensor::from_vector<int32_t>({c}, {1});
    g->col().all_reduce(t);
    EXPECT_EQ(t.to_vector<int32_t>()[0], Pc * (Pc - 1) / 2);
  }
}

TEST(ProcessGridMpi, AGridThatDoesNotMatchTheJobSaysHowToStartIt) {
  const int P = test::world_size();
  GridShape wrong{1, P + 1, 1};
  std::string m = test::error_message([&] { ProcessGrid::create(wrong); });
  const std::string n = std::to_string(P + 1);
  EXPECT_EQ(m, "--grid " + n + "x1 needs " + n + " processes, the job has " + std::to_string(P) +
                   "; start mpiexec -n " + n + " or change --grid");
  GridShape staged{2, 1, P};
  m = test::error_message([&] { ProcessGrid::create(staged); });
  EXPECT_NE(m.find("--grid 2x1x" + std::to_string(P) + " needs " + std::to_string(2 * P) + " processes"),
            std::string::npos)
      << m;
  // The job goes on: a matching grid still works afterwards.
  auto g = ProcessGrid::create(GridShape{1, 1, P});
  g->world().barrier();
}

// Host memory is shared by the ranks of a node: counted by host name here, independently of
// the shared-memory split ranks_sharing_device uses. The stand-in's memory is the host's too.
TEST(ProcessGridMpi, RanksSharingHostMemoryAreTheNodesRanks) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  const int P = test::world_size();
  std::vector<char> all(size_t(P) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  int same_host = 0;
  for (int r = 0; r < P; ++r) same_host += std::string(&all[size_t(r) * MPI_MAX_PROCESSOR_NAME]) == name;
  EXPECT_EQ(ranks_sharing_device(Device::cpu()), same_host);
  EXPECT_EQ(ranks_sharing_device(Device{Device::Kind::cuda_standin, 0}), same_host);
}

}  // namespace
}  // namespace gridnn::parallel
