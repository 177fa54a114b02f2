// The main() of every gridnn benchmark binary: Google Benchmark's flags, then the
// binary's register_benchmarks() (which sees whether a GPU is present), then the run.
#pragma once

#include <benchmark/benchmark.h>

namespace gridnn::bench {
void register_benchmarks();
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  gridnn::bench::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
