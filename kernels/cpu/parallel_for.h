// The CPU backend's loop: f(i) for i in [0, n), split statically over the OpenMP threads
// (static schedule: the same split every run, so results are deterministic).
//
// Small loops run on the calling thread: starting a parallel region costs microseconds,
// and on a machine where OpenBLAS's own threads are still spinning after a GEMM, waking
// OpenMP threads for a few thousand elements made a small training step 25x slower
// (bench/RESULTS.md). `work_per_item` scales the threshold for heavier items.
#pragma once

#include <cstdint>

namespace gridnn::kernels::cpu {

constexpr int64_t kParallelGrain = 32768;  // element-sized units of work below which we stay serial

template <class F>
void parallel_for(int64_t n, F&& f, int64_t work_per_item = 1) {
  if (n * work_per_item < kParallelGrain) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace gridnn::kernels::cpu
