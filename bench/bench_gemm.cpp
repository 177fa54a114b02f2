// GEMM throughput: C[m, n] = A[m, k] B[k, n] for square sizes, on the CPU (oneDNN's sgemm) and,
// when a CUDA device is present, on the GPU (cuBLAS) in fp32, tf32, bf16 and f16.
//
//   build/default/bench/bench_gemm [--benchmark_filter=cpu] [--benchmark_min_time=0.2]
//
// Counter GFLOP (shown per second) = 2 m n k per iteration. GPU timings synchronize the device after
// every product, so they include launch overhead (small sizes show it).
#include <string>

#include "bench/bench_main.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"

namespace {
using namespace gridnn;

void run_gemm(benchmark::State& state, Device device, DType dtype, ops::MathMode math) {
  const int64_t n = state.range(0);
  Tensor a = Tensor::empty({n, n}, dtype, device), b = Tensor::empty({n, n}, dtype, device);
  Tensor c = Tensor::empty({n, n}, dtype, device);
  ops::uniform_(a, -1, 1, {1, 1});
  ops::uniform_(b, -1, 1, {1, 2});
  ops::GemmOptions opt;
  opt.math = math;
  ops::gemm(a, b, c, opt);  // warm-up: handles, heuristics, caches
  synchronize(device);
  for (auto _ : state) {
    ops::gemm(a, b, c, opt);
    synchronize(device);
  }
  state.counters["GFLOP"] =
      benchmark::Counter(2e-9 * double(n) * double(n) * double(n), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void gridnn::bench::register_benchmarks() {
  for (int64_t n : {128, 256, 512, 1024})
    register_guarded("gemm/cpu/f32",
                     [](benchmark::State& s) { run_gemm(s, Device::cpu(), DType::f32, ops::MathMode::fp32); })
        ->Arg(n)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  if (cuda_device_count() == 0) return;
  struct GpuCase {
    const char* name;
    DType dtype;
    ops::MathMode math;
  };
  static const GpuCase cases[] = {{"fp32", DType::f32, ops::MathMode::fp32},
                                  {"tf32", DType::f32, ops::MathMode::tf32},
                                  {"bf16", DType::bf16, ops::MathMode::fp32},
                                  {"f16", DType::f16, ops::MathMode::fp32}};
  for (const GpuCase& gc : cases)
    for (int64_t n : {1024, 4096, 8192})
      register_guarded("gemm/cuda/" + std::string(gc.name),
                       [gc](benchmark::State& s) { run_gemm(s, Device::cuda(0), gc.dtype, gc.math); })
          ->Arg(n)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
}
