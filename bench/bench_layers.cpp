// Layer throughput at the 3D-ResAttNet-18 shapes (docs/design.md §5) for width w = 16, one input
// channel and cubic inputs of 64 and 128: the stem convolution, max pooling, the first
// convolution of layer1..layer4, BatchNorm3d on the layer1 activation and the attention
// blocks att3 (on layer3's output) and att4 (on layer4's output). Batch 2 on the CPU and,
// when a CUDA device is present, batch 8 on the GPU.
//
//   build/default/bench/bench_layers [--benchmark_filter=/64/cpu] [--benchmark_min_time=0.1]
//
// Names: <op>/<layer>/<input size>/<device>, e.g. "conv3d_fwd/stem/64/cpu". Convolutions are
// timed through the ops of kernels/conv3d.h (forward, backward data, backward filter
// separately); pooling, batch norm and attention through the timing harness of
// models/run/timing.h, as calibration and --placement auto time them (training mode;
// backward after one forward). On the GPU the convolutions and attention
// also run in the reduced-precision math modes (kernels/math_mode.h), the mode joined to
// the device: "conv3d_fwd/stem/64/cuda_tf32", "attention_bwd/att3/128/cuda_bf16" (fp32
// cases keep the plain names, which bench/compare_torch.py selects by "^name(/|$)"). bf16 times include casting the
// operands to bf16 and the result back, as a training step in that mode pays them.
// On the GPU also conv3d_bwd_filter_one_channel_kernel/stem/<size>/cuda: the stem's backward
// filter by the one-channel kernel alone (docs/design.md §3), to set beside conv3d_bwd_filter.
//
// Counters (shown per second):
//   GFLOP  conv: 2 N O Do Ho Wo C kd kh kw per iteration for each of the three ops.
//          attention forward: 2 B (N C (C/4 + C) + N^2 (C/8 + C)) (the three 1x1x1
//          convolutions, Q^T K and V A^T; softmax not counted); backward: twice that.
//   GB     the compulsory traffic, each tensor read or written once (the kernels make more
//          passes than that, so this is a lower bound on the bytes really moved):
//          batch norm forward x + y, backward x + dy + dx; max pooling forward x + y + the
//          i64 argmax, backward dy + argmax + dx.
// GPU timings synchronize the device after every call.
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "kernels/conv3d.h"
#if GRIDNN_HAVE_CUDA && GRIDNN_HAVE_CUDNN
#include "kernels/cuda/conv3d_one_channel.h"
#endif
#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/pool3d.h"
#include "models/run/timing.h"

namespace {
using namespace gridnn;

constexpr int64_t kWidth = 16;

Tensor random_tensor(const Shape& shape, Device device, uint64_t stream) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  ops::uniform_(t, -1, 1, {7, stream});
  return t;
}

void set_counter(benchmark::State& state, const char* name, double value) {
  state.counters[name] = benchmark::Counter(value, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- convolutions ----------------------------------------------------------------------

struct ConvCase {
  const char* layer;
  int64_t in_c, out_c, kernel, stride, padding;
  int64_t in_size_64;  // the input's cubic size for a 64^3 network input (doubles for 128^3)
};

// Stem conv1; then conv1 of the first block of each stage (layer2..4: the strided one), and
// one of layer4's unit-stride convs.
const ConvCase kConvCases[] = {
    {"stem", 1, kWidth, 7, 2, 3, 64},
    {"layer1", kWidth, kWidth, 3, 1, 1, 16},
    {"layer2", kWidth, 2 * kWidth, 3, 2, 1, 16},
    {"layer3", 2 * kWidth, 4 * kWidth, 3, 2, 1, 8},
    {"layer4", 4 * kWidth, 8 * kWidth, 3, 2, 1, 4},
    // layer4's unit-stride conv: a 3^3 kernel on a 2^3 input (larger than the input).
    {"layer4_residual", 8 * kWidth, 8 * kWidth, 3, 1, 1, 2},
};

enum class ConvOp { forward, backward_data, backward_filter };

void run_conv(benchmark::State& state, Device device, int64_t batch, const ConvCase& cc, int64_t scale, ConvOp op,
              ops::MathMode math) {
  const int64_t s = cc.in_size_64 * scale;
  const ops::Conv3dGeometry g =
      ops::conv3d_geometry("bench", cc.in_c, cc.out_c, {cc.kernel, cc.kernel, cc.kernel},
                           {cc.stride, cc.stride, cc.stride}, {cc.padding, cc.padding, cc.padding}, {s, s, s});
  const Shape y_shape = ops::conv3d_output_shape(g, batch);
  Tensor x = random_tensor({batch, cc.in_c, s, s, s}, device, 1);
  Tensor w = random_tensor({cc.out_c, cc.in_c, cc.kernel, cc.kernel, cc.kernel}, device, 2);
  Tensor dy = random_tensor(y_shape, device, 3);
  Tensor y = Tensor::empty(y_shape, DType::f32, device);
  Tensor dx = Tensor::empty(x.shape(), DType::f32, device);
  Tensor dw = Tensor::zeros(w.shape(), DType::f32, device);
  const std::function<void()> call = [&] {
    switch (op) {
      case ConvOp::forward:
        ops::conv3d_forward(x, w, Tensor(), g, y, math);
        break;
      case ConvOp::backward_data:
        ops::conv3d_backward_data(dy, w, g, dx, math);
        break;
      case ConvOp::backward_filter:
        ops::conv3d_backward_filter(x, dy, g, dw, math);
        break;
    }
  };
  call();  // warm-up: cuDNN algorithm search, column buffers, caches
  synchronize(device);
  for (auto _ : state) {
    call();
    synchronize(device);
  }
  const double out_volume = double(y_shape[2]) * double(y_shape[3]) * double(y_shape[4]);
  const double macs =
      double(batch) * double(cc.out_c) * out_volume * double(cc.in_c) * double(cc.kernel * cc.kernel * cc.kernel);
  set_counter(state, "GFLOP", 2e-9 * macs);
}

#if GRIDNN_HAVE_CUDA && GRIDNN_HAVE_CUDNN
// The stem's backward filter by the one-channel kernel alone (kernels/cuda/conv3d_one_channel.h),
// fp32, beside conv3d_bwd_filter/stem, which runs whichever of it and cuDNN was faster on
// its first call (GRIDNN_LOG_CUDNN=1 prints both times, cuDNN's being its deterministic
// choice, ALGO_1 for the stem).
void run_one_channel_kernel(benchmark::State& state, Device device, int64_t batch, int64_t scale) {
  if (device.runs_on_host()) {
    state.SkipWithError("needs a real GPU (the device stand-in has no CUDA kernels)");
    return;
  }
  const ConvCase& cc = kConvCases[0];
  const int64_t s = cc.in_size_64 * scale;
  const ops::Conv3dGeometry g =
      ops::conv3d_geometry("bench", cc.in_c, cc.out_c, {cc.kernel, cc.kernel, cc.kernel},
                           {cc.stride, cc.stride, cc.stride}, {cc.padding, cc.padding, cc.padding}, {s, s, s});
  Tensor x = random_tensor({batch, cc.in_c, s, s, s}, device, 1);
  Tensor dy = random_tensor(ops::conv3d_output_shape(g, batch), device, 3);
  Tensor dw = Tensor::zeros(ops::conv3d_weight_shape(g), DType::f32, device);
  namespace kernel = kernels::cuda::one_channel;
  if (!kernel::fits(g, device.index)) {
    state.SkipWithError("the one-channel kernel does not take the stem on this device");
    return;
  }
  Tensor workspace =
      Tensor::empty({int64_t((kernel::workspace_bytes(g, batch) + 3) / sizeof(float))}, DType::f32, device);
  kernel::backward_filter(x, dy, g, dw, workspace.raw());  // warm-up
  synchronize(device);
  for (auto _ : state) {
    kernel::backward_filter(x, dy, g, dw, workspace.raw());
    synchronize(device);
  }
  const double out_volume = double(g.out_volume());
  set_counter(state, "GFLOP", 2e-9 * double(batch) * double(cc.out_c) * out_volume * double(g.kernel_volume()));
}
#endif

// ---- layers (forward, or backward after one forward) ----------------------------------

// Through the timing harness (models/run/timing.h): one forward first (warm-up, and the
// state backward needs), then the timed calls. A backward is timed after an untimed forward
// of its own: a layer may free what its backward used (max pooling's argmax).
void run_layer(benchmark::State& state, Device device, nn::Module& layer, const Shape& in_shape, bool backward,
               double per_iteration, const char* counter) {
  layer.train();
  run::ForwardBackward run(layer, random_tensor(in_shape, device, 4), 5);
  run.forward();
  if (backward) run.backward();
  for (auto _ : state) {
    if (backward) {
      state.PauseTiming();
      run.forward();
      synchronize(device);
      state.ResumeTiming();
    }
    Tensor out = backward ? run.backward() : run.forward();
    benchmark::DoNotOptimize(out);
  }
  set_counter(state, counter, per_iteration);
}

void run_maxpool(benchmark::State& state, Device device, int64_t batch, int64_t scale, bool backward) {
  // Stem pooling: w channels, conv1's output (32^3 for a 64^3 input) -> half of it.
  const int64_t s = 32 * scale, so = s / 2;
  nn::MaxPool3d pool(3, 2, 1);
  const double in = double(batch * kWidth) * double(s * s * s), out = double(batch * kWidth) * double(so * so * so);
  const double bytes = backward ? 4 * out + 8 * out + 4 * in : 4 * in + 4 * out + 8 * out;
  run_layer(state, device, pool, {batch, kWidth, s, s, s}, backward, 1e-9 * bytes, "GB");
}

void run_batchnorm(benchmark::State& state, Device device, int64_t batch, int64_t scale, bool backward) {
  // layer1's activation: w channels at 16^3 for a 64^3 input.
  const int64_t s = 16 * scale;
  nn::BatchNorm3d bn(kWidth, 1e-5, 0.1, device);
  bn.initialize(1);
  const double n = double(batch * kWidth) * double(s * s * s);
  run_layer(state, device, bn, {batch, kWidth, s, s, s}, backward, 1e-9 * 4 * n * (backward ? 3 : 2), "GB");
}

void run_attention(benchmark::State& state, Device device, int64_t batch, int64_t channels, int64_t size, bool backward,
                   ops::MathMode math) {
  nn::SelfAttention3d att(channels, device);
  att.initialize(1);
  att.set_math_mode(math);
  // gamma starts at 0; make it nonzero so the values look like a trained layer's (the
  // amount of work does not depend on it).
  for (auto& [name, p] : att.named_parameters())
    if (name == "gamma") ops::fill(p->value, 0.5);
  const double c = double(channels), n = double(size * size * size);
  const double macs = double(batch) * (n * c * (c / 4 + c) + n * n * (c / 8 + c));
  run_layer(state, device, att, {batch, channels, size, size, size}, backward, 2e-9 * macs * (backward ? 2 : 1),
            "GFLOP");
}

// ---- registration ---------------------------------------------------------------------

void add(const std::string& name, std::function<void(benchmark::State&)> fn, bool cpu, bool once) {
  auto* b = bench::register_guarded(name, std::move(fn));
  b->Unit(cpu ? benchmark::kMillisecond : benchmark::kMicrosecond)->UseRealTime();
  if (once) b->Iterations(1);
}

// Convolutions and attention in `math` (fp32 everywhere; tf32 and bf16 on the GPU).
void register_math(Device device, const std::string& dev, int64_t batch, ops::MathMode math) {
  const bool cpu = device.is_cpu();
  const std::string mode = math == ops::MathMode::fp32 ? "" : std::string("_") + ops::str(math);
  for (int64_t size : {64, 128}) {
    const int64_t scale = size / 64;
    const std::string tail = "/" + std::to_string(size) + "/" + dev + mode;
    // On the CPU the 128^3 stem convolutions take 0.4-0.7 s per call on 2 cores (0.35-0.6 s
    // on one; 2026-12-02), longer on a loaded machine, and Google Benchmark would run each
    // 2-3 times: one iteration each (the noise is small next to that) keeps the whole binary
    // near 20 s with --benchmark_min_time=0.1. Nothing else at these shapes takes over 0.3 s.
    for (const ConvCase& cc : kConvCases) {
      const bool once = cpu && size == 128 && std::string(cc.layer) == "stem";
      add(
          "conv3d_fwd/" + std::string(cc.layer) + tail,
          [=](benchmark::State& s) { run_conv(s, device, batch, cc, scale, ConvOp::forward, math); }, cpu, once);
      add(
          "conv3d_bwd_data/" + std::string(cc.layer) + tail,
          [=](benchmark::State& s) { run_conv(s, device, batch, cc, scale, ConvOp::backward_data, math); }, cpu, once);
      add(
          "conv3d_bwd_filter/" + std::string(cc.layer) + tail,
          [=](benchmark::State& s) { run_conv(s, device, batch, cc, scale, ConvOp::backward_filter, math); }, cpu,
          once);
    }
    for (bool bwd : {false, true}) {
      const std::string op = bwd ? "_bwd" : "_fwd";
      // att3: 4w channels at 4^3 (64^3 input); att4: 8w channels at 2^3.
      add(
          "attention" + op + "/att3" + tail,
          [=](benchmark::State& s) { run_attention(s, device, batch, 4 * kWidth, 4 * scale, bwd, math); }, cpu, false);
      add(
          "attention" + op + "/att4" + tail,
          [=](benchmark::State& s) { run_attention(s, device, batch, 8 * kWidth, 2 * scale, bwd, math); }, cpu, false);
    }
  }
}

// Pooling and batch norm (always fp32).
void register_fp32_only(Device device, const std::string& dev, int64_t batch) {
  const bool cpu = device.is_cpu();
  for (int64_t size : {64, 128}) {
    const int64_t scale = size / 64;
    const std::string tail = "/" + std::to_string(size) + "/" + dev;
    for (bool bwd : {false, true}) {
      const std::string op = bwd ? "_bwd" : "_fwd";
      add(
          "maxpool3d" + op + "/stem" + tail, [=](benchmark::State& s) { run_maxpool(s, device, batch, scale, bwd); },
          cpu, false);
      add(
          "batchnorm3d" + op + "/layer1" + tail,
          [=](benchmark::State& s) { run_batchnorm(s, device, batch, scale, bwd); }, cpu, false);
    }
  }
}

void register_device(Device device, const std::string& dev, int64_t batch) {
  register_math(device, dev, batch, ops::MathMode::fp32);
  register_fp32_only(device, dev, batch);
  if (device.is_cpu()) return;  // the CPU's tf32 and bf16 are emulations, not speed-ups
#if GRIDNN_HAVE_CUDA && GRIDNN_HAVE_CUDNN
  for (int64_t size : {64, 128})
    add(
        "conv3d_bwd_filter_one_channel_kernel/stem/" + std::to_string(size) + "/" + dev,
        [=](benchmark::State& s) { run_one_channel_kernel(s, device, batch, size / 64); }, false, false);
#endif
  register_math(device, dev, batch, ops::MathMode::tf32);
  register_math(device, dev, batch, ops::MathMode::bf16);
}

}  // namespace

void gridnn::bench::register_benchmarks() {
  register_device(Device::cpu(), "cpu", 2);
  if (cuda_device_count() > 0) register_device(Device::cuda(0), "cuda", 8);
}
