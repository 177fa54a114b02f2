// Collectives on the process grid (docs/design.md §4, §6): all-reduce, all-gather and
// reduce-scatter over the row, col and world communicators, a halo exchange (send_recv of
// n elements to both neighbours) over row, and ping-pong between world ranks 0 and 1, at
// 1 to 4M elements (4-byte words, powers of 4). Where a communicator's ranks share this node,
// its all-reduce runs through shared memory (parallel/shared_reduce.h); the kinds "row-msg",
// "col-msg" and "world-msg" time the same all-reduce by messages, on communicators made with
// it turned off, in the same run. Run under mpiexec:
//
//   mpiexec -n 2 bench_collectives --grid 2x1 [--reps 10] [--benchmark_filter=world]
//
// Each benchmark is one sample of plan/calibration's time_comm_op (warm-up, `reps` runs
// after a barrier, this rank's median, the max over the ranks): manual time. Counters:
//   words    words received per process in the α–β model's convention (calibration.h)
//   GB/s     4 · words / time
//   model_us the α–β model's prediction α·m + β·w, α and β fitted per communicator kind on a
//            first, quieter pass over the same sizes (5 reps; printed before the table)
// Every rank runs the same benchmarks in the same order with fixed iterations (collectives
// must match); only rank 0 prints. Communicators of one rank are skipped.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_mpi.h"
#include "core/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"
#include "plan/calibration.h"

namespace {

using namespace gridnn;

struct Kind {
  std::string name;  // calibration kind: "row", "col", "world", "pingpong"
  parallel::Communicator* comm;
  std::vector<std::string> ops;
};

// Takes "--grid X" / "--grid=X" and "--reps N" out of argv (before benchmark::Initialize).
void take_args(int* argc, char** argv, std::string* grid, int* reps) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag, std::string* v) {
      const std::string f = flag;
      if (a == f && i + 1 < *argc) {
        *v = argv[++i];
        return true;
      }
      if (a.rfind(f + "=", 0) == 0) {
        *v = a.substr(f.size() + 1);
        return true;
      }
      return false;
    };
    std::string r;
    if (value("--grid", grid)) continue;
    if (value("--reps", &r)) {
      *reps = std::atoi(r.c_str());
      GRIDNN_REQUIRE(*reps >= 1, "bench_collectives: --reps must be >= 1, got ", r);
      continue;
    }
    argv[out++] = argv[i];
  }
  *argc = out;
}

int body(MpiSession& mpi, int argc, char** argv) {
  std::string grid_text = "1x" + std::to_string(mpi.size());
  int reps = 10;
  take_args(&argc, argv, &grid_text, &reps);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  auto grid = parallel::ProcessGrid::create(parallel::GridShape::parse(grid_text));
  parallel::set_mpi_shared_reduce(0);
  auto by_messages = parallel::ProcessGrid::create(parallel::GridShape::parse(grid_text));
  parallel::set_mpi_shared_reduce(-1);

  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= (int64_t(1) << 22); n *= 4) sizes.push_back(n);
  const std::vector<Kind> kinds{{"row", &grid->row(), {"all_reduce", "all_gather", "reduce_scatter", "halo"}},
                                {"col", &grid->col(), {"all_reduce", "all_gather", "reduce_scatter"}},
                                {"world", &grid->world(), {"all_reduce", "all_gather", "reduce_scatter"}},
                                {"row-msg", &by_messages->row(), {"all_reduce"}},
                                {"col-msg", &by_messages->col(), {"all_reduce"}},
                                {"world-msg", &by_messages->world(), {"all_reduce"}},
                                {"pingpong", &grid->world(), {"pingpong"}}};

  // The fit pass: α, β per kind (every rank computes the same fit from the same samples).
  std::map<std::string, plan::CommFit> fits;
  for (const Kind& k : kinds) {
    if (k.comm->size() < 2) continue;
    std::vector<plan::CommSample> samples;
    for (const std::string& op : k.ops) {
      auto s = plan::time_comm_op(*k.comm, op, sizes, {1, 5});
      samples.insert(samples.end(), s.begin(), s.end());
    }
    fits[k.name] = plan::fit_alpha_beta(samples);
  }
  if (mpi.rank() == 0) {
    std::printf("grid %s (%d processes); alpha-beta fit per communicator (model_us below):\n",
                grid->shape().str().c_str(), mpi.size());
    for (const auto& [name, f] : fits)
      std::printf("  %-9s alpha %8.2f us  bandwidth %8.3f GB/s  residual %5.1f%%\n", name.c_str(), f.alpha * 1e6,
                  f.beta > 0 ? 4.0 / f.beta / 1e9 : 0.0, 100 * f.residual);
    std::fflush(stdout);
  }

  for (const Kind& k : kinds) {
    if (k.comm->size() < 2) continue;
    const plan::CommFit fit = fits.at(k.name);
    for (const std::string& op : k.ops)
      for (int64_t n : sizes) {
        const std::string name = k.name + "/" + op + "/" + std::to_string(n);
        parallel::Communicator* comm = k.comm;
        // Not guarded (bench/bench_main.h): a rank that skipped a case would leave the others
        // waiting in its collectives; an exception ends the job instead (MpiSession::run).
        benchmark::RegisterBenchmark(name.c_str(),
                                     [comm, op, n, reps, fit](benchmark::State& state) {
                                       plan::CommSample s;
                                       for (auto _ : state) {
                                         s = plan::time_comm_op(*comm, op, {n}, {2, reps}).front();
                                         state.SetIterationTime(s.seconds);
                                       }
                                       const auto [m, w] = plan::model_messages_words(op, s.procs, s.elements);
                                       state.counters["words"] = w;
                                       state.counters["GB/s"] = s.seconds > 0 ? 4.0 * w / s.seconds / 1e9 : 0.0;
                                       state.counters["model_us"] = (fit.alpha * m + fit.beta * w) * 1e6;
                                     })
            ->UseManualTime()
            ->Iterations(1)
            ->Unit(benchmark::kMicrosecond);
      }
  }
  return bench::run_benchmarks_reported_by_rank0(mpi.rank());
}

}  // namespace

int main(int argc, char** argv) {
  return gridnn::MpiSession::run(&argc, &argv, [&](gridnn::MpiSession& mpi) { return body(mpi, argc, argv); });
}
