// Memory-bound kernels: add, ReLU forward, sum along the last dimension and Philox
// normal init, on the CPU and (when present) the GPU. Counter GB/s counts the bytes each
// op must read and write once (shown per second).
//
//   build/bench/bench_elementwise [--benchmark_filter=cuda]
#include "bench/bench_main.h"

#include <functional>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "kernels/reduce.h"

namespace {
using namespace gridnn;

struct Case {
  const char* name;
  int tensors_moved;  // full-size tensors read or written per call
  std::function<void(Tensor& a, Tensor& b, Tensor& c)> op;
};

const Case kCases[] = {
    {"add", 3, [](Tensor& a, Tensor& b, Tensor& c) { ops::add(a, b, c); }},
    {"relu", 2, [](Tensor& a, Tensor&, Tensor& c) { ops::relu_forward(a, c); }},
    {"sum_rows", 1, [](Tensor& a, Tensor&, Tensor&) { ops::sum(a, -1); }},
    {"sum_rows_of_4", 1, [](Tensor& a, Tensor&, Tensor&) { ops::sum(a.reshape({a.numel() / 4, 4}), -1); }},
    {"normal_init", 1, [](Tensor& a, Tensor&, Tensor&) { ops::normal_(a, 0, 1, {1, 3}); }},
};

void run_case(benchmark::State& state, Device device, const Case& c) {
  const int64_t n = state.range(0);
  Tensor a = Tensor::empty({n / 1024, 1024}, DType::f32, device);
  Tensor b = Tensor::empty(a.shape(), DType::f32, device), out = Tensor::empty(a.shape(), DType::f32, device);
  ops::uniform_(a, -1, 1, {1, 1});
  ops::uniform_(b, -1, 1, {1, 2});
  c.op(a, b, out);
  synchronize(device);
  for (auto _ : state) {
    c.op(a, b, out);
    synchronize(device);
  }
  state.counters["GB"] = benchmark::Counter(1e-9 * double(c.tensors_moved) * double(a.nbytes()),
                                              benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void gridnn::bench::register_benchmarks() {
  const bool gpu = cuda_device_count() > 0;
  for (const Case& c : kCases) {
    benchmark::RegisterBenchmark((std::string(c.name) + "/cpu").c_str(),
                                 [&c](benchmark::State& s) { run_case(s, Device::cpu(), c); })
        ->Arg(1 << 22)->Unit(benchmark::kMicrosecond)->UseRealTime();
    if (gpu)
      benchmark::RegisterBenchmark((std::string(c.name) + "/cuda").c_str(),
                                   [&c](benchmark::State& s) { run_case(s, Device::cuda(0), c); })
          ->Arg(1 << 26)->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
}
