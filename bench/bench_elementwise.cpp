// Memory-bound kernels: add, ReLU forward, sums (along rows of 1024 and of 4, of the whole
// tensor, along four long rows) and Philox normal init, on the CPU and (when present) the
// GPU. Counter GB/s counts the bytes each op must read and write once (shown per second).
// Also batch normalization's training steps on two layer shapes: forward = the channel sums
// twice (the mean, then the sums around it), moments, invstd and normalize, as
// nn::BatchNorm3d runs them (x read three times, y written); backward = the backward sums
// and the input gradient (x and dy read twice, dx written).
//
//   build/default/bench/bench_elementwise [--benchmark_filter=cuda]
//   OMP_NUM_THREADS=1 build/default/bench/bench_elementwise --benchmark_filter=batchnorm
#include <functional>
#include <string>

#include "bench/bench_main.h"
#include "kernels/batchnorm.h"
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
    {"sum_rows_of_4", 1,
     [](Tensor& a, Tensor&, Tensor&) {
       ops::sum(a.reshape({a.numel() / 4, 4}), -1);
     }},
    // One output (segments of kernels/reduce_bodies.h and their fold), four long rows.
    {"sum_all", 1, [](Tensor& a, Tensor&, Tensor&) { ops::sum_all(a); }},
    {"sum_4_rows", 1,
     [](Tensor& a, Tensor&, Tensor&) {
       ops::sum(a.reshape({4, a.numel() / 4}), -1);
     }},
    {"normal_init", 1,
     [](Tensor& a, Tensor&, Tensor&) {
       ops::normal_(a, 0, 1, {1, 3});
     }},
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

// ---- batch normalization ---------------------------------------------------------------

struct BatchNormTensors {
  Tensor x, dy, y, dx, sums, mean, var, invstd, weight, bias;
  int64_t count;
};

BatchNormTensors batchnorm_tensors(const Shape& shape, Device device) {
  const int64_t c = shape[1];
  auto channels = [&] { return Tensor::empty({c}, DType::f32, device); };
  BatchNormTensors t{Tensor::empty(shape, DType::f32, device),
                     Tensor::empty(shape, DType::f32, device),
                     Tensor::empty(shape, DType::f32, device),
                     Tensor::empty(shape, DType::f32, device),
                     Tensor::empty({2, c}, DType::f32, device),
                     channels(),
                     channels(),
                     channels(),
                     channels(),
                     channels(),
                     shape.numel() / c};
  ops::uniform_(t.x, -1, 3, {1, 1});
  ops::uniform_(t.dy, -1, 1, {1, 2});
  ops::uniform_(t.weight, 0.5, 2, {1, 3});
  ops::uniform_(t.bias, -1, 1, {1, 4});
  return t;
}

void batchnorm_forward(BatchNormTensors& t) {
  const Tensor none;
  Tensor no_var;
  ops::batchnorm_channel_sums(t.x, none, t.sums);
  ops::batchnorm_moments(t.sums, none, t.count, t.mean, no_var);
  ops::batchnorm_channel_sums(t.x, t.mean, t.sums);
  ops::batchnorm_moments(t.sums, t.mean, t.count, t.mean, t.var);
  ops::batchnorm_invstd(t.var, 1e-5, t.invstd);
  ops::batchnorm_normalize(t.x, t.mean, t.invstd, t.weight, t.bias, t.y);
}

void batchnorm_backward(BatchNormTensors& t) {
  ops::batchnorm_backward_sums(t.x, t.dy, t.mean, t.invstd, t.sums);
  ops::batchnorm_backward_input(t.x, t.dy, t.mean, t.invstd, t.weight, t.sums, t.count, true, t.dx);
}

void run_batchnorm(benchmark::State& state, Device device, const Shape& shape, bool backward) {
  BatchNormTensors t = batchnorm_tensors(shape, device);
  batchnorm_forward(t);
  if (backward) batchnorm_backward(t);
  synchronize(device);
  for (auto _ : state) {
    if (backward)
      batchnorm_backward(t);
    else
      batchnorm_forward(t);
    synchronize(device);
  }
  const double moved = backward ? 5 : 4;  // full-size tensors read or written per call
  state.counters["GB"] =
      benchmark::Counter(1e-9 * moved * double(t.x.nbytes()), benchmark::Counter::kIsIterationInvariantRate);
}

std::string shape_label(const Shape& s) {
  std::string out;
  for (int64_t d : s.dims()) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

void register_batchnorm(Device device, const std::string& dev) {
  for (const Shape& shape : {Shape{8, 16, 32, 32, 32}, Shape{2, 64, 16, 16, 16}})
    for (bool backward : {false, true})
      bench::register_guarded(
          std::string(backward ? "batchnorm_bwd/" : "batchnorm_fwd/") + shape_label(shape) + "/" + dev,
          [=](benchmark::State& s) { run_batchnorm(s, device, shape, backward); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
}

}  // namespace

void gridnn::bench::register_benchmarks() {
  const bool gpu = cuda_device_count() > 0;
  for (const Case& c : kCases) {
    register_guarded(std::string(c.name) + "/cpu", [&c](benchmark::State& s) { run_case(s, Device::cpu(), c); })
        ->Arg(1 << 22)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    if (gpu)
      register_guarded(std::string(c.name) + "/cuda", [&c](benchmark::State& s) { run_case(s, Device::cuda(0), c); })
          ->Arg(1 << 26)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  }
  register_batchnorm(Device::cpu(), "cpu");
  if (gpu) register_batchnorm(Device::cuda(0), "cuda");
}
