// The timing harness (timing.h).
#include "models/run/timing.h"

#include <chrono>
#include <map>
#include <string>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "plan/calibration.h"

namespace gridnn::run {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Tensor uniform(const Shape& shape, const Device& device, uint64_t seed, uint64_t stream) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  ops::uniform_(t, -1.0f, 1.0f, ops::RandomKey(seed, stream));
  return t;
}

}  // namespace

ForwardBackward::ForwardBackward(Step forward, Step backward, Tensor x, Device device, uint64_t seed)
    : forward_(std::move(forward)), backward_(std::move(backward)), x_(std::move(x)), device_(device), seed_(seed) {}

ForwardBackward::ForwardBackward(nn::Module& module, const Tensor& x, uint64_t seed)
    : ForwardBackward([&module](const Tensor& in) { return module.forward(in); },
                      [&module](const Tensor& dy) { return module.backward(dy); }, x, x.device(), seed) {}

Tensor ForwardBackward::forward() {
  Tensor y = forward_(x_);
  synchronize(device_);
  if (!dy_.defined()) dy_ = uniform(y.shape(), device_, seed_, 2);
  return y;
}

Tensor ForwardBackward::backward() {
  GRIDNN_REQUIRE(dy_.defined(), "ForwardBackward: backward() needs a forward() first");
  Tensor dx = backward_(dy_);
  synchronize(device_);
  return dx;
}

Timing ForwardBackward::measure(const TimingOptions& o) {
  GRIDNN_REQUIRE(o.reps >= 1 && o.warmup >= 0, "timing: reps must be >= 1 and warm-up >= 0");
  std::vector<double> forward_s, backward_s;
  for (int i = -o.warmup; i < o.reps; ++i) {
    const auto start = Clock::now();
    forward();
    const double f = seconds_since(start);
    const auto middle = Clock::now();
    backward();
    if (i >= 0) {
      forward_s.push_back(f);
      backward_s.push_back(seconds_since(middle));
    }
  }
  return {plan::median(forward_s), plan::median(backward_s)};
}

plan::ComputeTables time_layers(const RunOptions& options, const std::vector<int64_t>& batches,
                                const TimingOptions& timing) {
  GRIDNN_REQUIRE(!batches.empty(), "time_layers: give at least one batch");
  const Device device = options.device;
  std::unique_ptr<nn::Module> net = build_model(options);
  net->to(device);
  net->train();
  std::map<std::string, nn::Module*> by_name;
  for (nn::Module* m : net->modules()) by_name.emplace(m->name(), m);  // the outermost of a name
  // gamma starts at 0; make it nonzero so the values look like a trained layer's.
  for (auto& [name, p] : net->named_parameters())
    if (name.size() >= 5 && name.compare(name.size() - 5, 5, "gamma") == 0) ops::fill(p->value, 0.5);

  plan::RankStep step;
  net->describe(Shape{1, options.in_channels, options.input[0], options.input[1], options.input[2]}, step);
  plan::ComputeTables tables;
  for (const plan::LayerShape& l : step.layers) {
    nn::Module& layer = *by_name.at(l.name);
    plan::ComputeTable& t = tables[l.name];
    t.forward_flops = l.forward_flops;
    for (int64_t b : batches) {
      GRIDNN_REQUIRE(b >= 1, "time_layers: batch must be >= 1, got ", b);
      const int64_t voxels = l.in_size[0] * l.in_size[1] * l.in_size[2];
      const bool halve = l.kind == plan::LayerKind::bn && b * voxels < 2;
      const int64_t rows = halve ? 2 : b;
      const Shape in = l.kind == plan::LayerKind::fc
                           ? Shape{rows, l.in_channels}
                           : Shape{rows, l.in_channels, l.in_size[0], l.in_size[1], l.in_size[2]};
      ForwardBackward run(layer, uniform(in, device, timing.seed, 1), timing.seed);
      t.seconds[b] = run.measure(timing).total_s() / (halve ? 2 : 1);
    }
  }
  return tables;
}

}  // namespace gridnn::run
