// The main() of every gridnn benchmark binary run without MPI: Google Benchmark's flags,
// then the binary's register_benchmarks() (which sees whether a GPU is present), then the
// run. Benchmarks are registered through register_guarded, so one case that throws (cuDNN
// has no deterministic algorithm for it, the device is out of memory) is reported as an
// error and the others still run.
#pragma once

#include <benchmark/benchmark.h>

#include <exception>
#include <string>
#include <utility>

namespace gridnn::bench {

void register_benchmarks();

// Runs body(state), turning an exception into state.SkipWithError(its message). The
// exception has already left the body's `for (auto _ : state)` loop, so no iteration runs
// after the error, and Google Benchmark (1.7) accepts a body that returns early once
// SkipWithError has been called: the case is reported with its message instead of times.
template <class Body>
void run_guarded(benchmark::State& state, Body& body) {
  try {
    body(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  } catch (...) {
    state.SkipWithError("unknown exception");
  }
}

// benchmark::RegisterBenchmark(name, body) with the body run by run_guarded.
template <class Body>
benchmark::internal::Benchmark* register_guarded(const std::string& name, Body body) {
  return benchmark::RegisterBenchmark(
      name.c_str(), [body = std::move(body)](benchmark::State& state) mutable { run_guarded(state, body); });
}

}  // namespace gridnn::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  gridnn::bench::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
