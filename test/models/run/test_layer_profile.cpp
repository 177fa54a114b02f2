// models/run/layer_profile.h: gridnn-train --profile's per-layer table gathers every rank's
// layers beside each other (np 1 and 2), with a rank's own layers (another pipeline stage's)
// left blank in the others' columns, and the step-level lines last. Times come from sleeps:
// only "at least" is asserted.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "models/run/layer_profile.h"
#include "parallel/process_grid.h"
#include "test/support/mpi_main.h"

namespace gridnn {
namespace {

using namespace std::chrono_literals;

// The cells of the table's row named `name` ("| a | b |" -> {"a", "b"}), or {} without one.
std::vector<std::string> row(const std::string& table, const std::string& name) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| " + name + " |", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream in(line.substr(1));
    for (std::string cell; std::getline(in, cell, '|');)
      cells.push_back(cell.substr(1, cell.size() - 2 * !cell.empty()));
    return cells;
  }
  return {};
}

double ms(const std::string& cell) { return cell.empty() || cell == " " ? -1 : std::stod(cell); }

TEST(LayerProfile, EveryRanksLayersSideBySide) {
  auto grid = parallel::ProcessGrid::create({1, test::world_size(), 1});
  const int rank = grid->world_rank(), n = grid->world().size();
  const std::string conv = "stem.conv", own = "rank" + std::to_string(rank) + ".only";
  Profiler profiler;
  const auto start = std::chrono::steady_clock::now();
  {
    const ProfilerScope on(profiler);
    for (int step = 0; step < 2; ++step) {
      {
        const ProfileScope f(ProfileKind::convolution, conv, ProfilePass::forward);
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * (rank + 1)));
      }
      if (rank > 0) {
        const ProfileScope b(ProfileKind::pooling, own, ProfilePass::backward);
        std::this_thread::sleep_for(4ms);
      }
      const ProfileScope sync(ProfileKind::gradient_sync);
      std::this_thread::sleep_for(2ms);
    }
  }
  const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::map<std::string, double> comm{{conv, 0.006}};  // 3 ms a step
  const std::string table = run::layer_profile_table(*grid, profiler, comm, step_seconds, 2);

  const std::vector<std::string> header = row(table, "layer");
  ASSERT_EQ(header.size(), size_t(1 + 3 * n)) << table;
  EXPECT_EQ(header[1], "r0 fwd");
  EXPECT_EQ(header[3 * n], "r" + std::to_string(n - 1) + " comm");
  const std::vector<std::string> c = row(table, conv);
  ASSERT_EQ(c.size(), header.size()) << table;
  for (int r = 0; r < n; ++r) {
    EXPECT_GE(ms(c[size_t(1 + 3 * r)]), 10.0 * (r + 1)) << table;  // forward, per step
    EXPECT_EQ(ms(c[size_t(2 + 3 * r)]), 0.0) << table;             // no backward
    EXPECT_EQ(ms(c[size_t(3 + 3 * r)]), 3.0) << table;             // comm, per step
  }
  if (n > 1) {  // rank 1's own layer: blank in rank 0's columns
    const std::vector<std::string> o = row(table, "rank1.only");
    ASSERT_EQ(o.size(), header.size()) << table;
    EXPECT_EQ(ms(o[1]), -1) << table;
    EXPECT_GE(ms(o[5]), 4.0) << table;
  }
  const std::vector<std::string> sync = row(table, "(gradient_sync)");
  ASSERT_EQ(sync.size(), header.size()) << table;
  EXPECT_GE(ms(sync[1]), 2.0);
  const std::vector<std::string> step = row(table, "(step)");
  ASSERT_EQ(step.size(), header.size()) << table;
  EXPECT_NEAR(ms(step[size_t(1 + 3 * rank)]), 500 * step_seconds, 0.01);
  // The step-level lines after every layer.
  EXPECT_GT(table.find("(gradient_sync)"), table.find(conv));
  EXPECT_GT(table.find("(outside layers)"), table.find("(optimizer)"));
}

}  // namespace
}  // namespace gridnn
