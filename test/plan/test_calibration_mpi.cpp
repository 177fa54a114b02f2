// Calibration on a real communicator (plan/calibration.h, label mpi, 2 ranks): every
// operation's timing comes back finite, positive and the same on every rank, the fit gives
// usable α, β. (A layer's compute timing: test/models/run/test_step_plan.cpp.)
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/mpi_check.h"
#include "parallel/mpi_communicator.h"
#include "plan/calibration.h"
#include "test/support/mpi_main.h"

namespace gridnn::plan {
namespace {

std::unique_ptr<parallel::Communicator> world() {
  MPI_Comm c;
  GRIDNN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  return parallel::make_mpi_communicator(c, "world");
}

TEST(CalibrationMpi, TimesEveryOperationAndFits) {
  auto comm = world();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<CommSample> all;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "pingpong", "halo"}) {
    const auto s = time_comm_op(*comm, op, {1, 1024, 65536}, {1, 5});
    ASSERT_EQ(s.size(), 3u) << op;
    for (const CommSample& x : s) {
      EXPECT_EQ(x.op, op);
      EXPECT_EQ(x.procs, comm->size());
      EXPECT_TRUE(std::isfinite(x.seconds) && x.seconds > 0 && x.seconds < 10) << op << " " << x.seconds;
      // The max over the ranks: the same on every rank.
      Tensor t = Tensor::from_vector(std::vector<float>{float(x.seconds)}, Shape{1});
      Tensor lo = Tensor::from_vector(std::vector<float>{float(-x.seconds)}, Shape{1});
      comm->all_reduce(t, parallel::ReduceOp::max);
      comm->all_reduce(lo, parallel::ReduceOp::max);
      EXPECT_EQ(t.to_vector<float>()[0], -lo.to_vector<float>()[0]) << op;
    }
    all.insert(all.end(), s.begin(), s.end());
  }
  // all_gather on p ranks moves whole multiples of p.
  EXPECT_EQ(all[3].elements % comm->size(), 0);
  // Timings on a shared machine are noise-prone: the fit is checked for sanity only (the
  // fit's arithmetic is tested on exact samples in test_calibration); either term may be
  // clamped at 0 when the noise says so.
  const CommFit f = fit_alpha_beta(all);
  EXPECT_TRUE(std::isfinite(f.alpha) && f.alpha >= 0 && f.alpha < 1e-2) << f.alpha;
  EXPECT_TRUE(std::isfinite(f.beta) && f.beta >= 0 && f.beta < 1e-6) << f.beta;
  EXPECT_GT(f.alpha + f.beta, 0);
  EXPECT_EQ(f.samples.size(), 15u);
}

}  // namespace
}  // namespace gridnn::plan
