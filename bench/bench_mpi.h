// What the benchmarks run under mpiexec (bench_collectives, bench_grid) share: every rank
// runs the registered cases in the same order (their collectives must match), and only
// rank 0 reports them.
#pragma once

#include <benchmark/benchmark.h>

#include <vector>

namespace gridnn::bench {

// benchmark::RunSpecifiedBenchmarks on every rank, printed by rank 0 alone, then
// benchmark::Shutdown; returns main's exit status.
inline int run_benchmarks_reported_by_rank0(int rank) {
  // Prints nothing: the reporter of ranks other than 0.
  class SilentReporter : public benchmark::BenchmarkReporter {
   public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  };
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace gridnn::bench
