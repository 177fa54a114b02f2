// The timing harness (timing.h).
#include "models/run/timing.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "models/dist/domain_parallel.h"
#include "models/run/step_plan.h"
#include "parallel/halo.h"
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
  std::vector<char> evict(size_t(std::max<int64_t>(o.evict_bytes, 0)), 1);
  for (int i = -o.warmup; i < o.reps; ++i) {
    if (!evict.empty()) {  // read (clean lines: no write-back charged to the layer)
      char sum = 0;
      for (size_t k = 0; k < evict.size(); k += 64) sum = char(sum + evict[k]);
      evict[0] = sum;  // the reads' result kept, so that they happen
    }
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

namespace {

// The modules of `net` by name, the outermost of each name.
std::map<std::string, nn::Module*> modules_by_name(nn::Module& net) {
  std::map<std::string, nn::Module*> by_name;
  for (nn::Module* m : net.modules()) by_name.emplace(m->name(), m);
  return by_name;
}

// `layer` forward + backward on a batch of `batch` inputs of layer shape `l` (its in_size).
// Batch norm needs two values per channel: a one-voxel activation of one sample is timed at
// two and halved.
double time_layer(nn::Module& layer, const plan::LayerShape& l, int64_t batch, const Device& device,
                  const TimingOptions& timing) {
  GRIDNN_REQUIRE(batch >= 1, "time_layers: batch must be >= 1, got ", batch);
  const int64_t voxels = l.in_size[0] * l.in_size[1] * l.in_size[2];
  const bool halve = l.kind == plan::LayerKind::bn && batch * voxels < 2;
  const int64_t rows = halve ? 2 : batch;
  const Shape in = l.kind == plan::LayerKind::fc ? Shape{rows, l.in_channels}
                                                 : Shape{rows, l.in_channels, l.in_size[0], l.in_size[1], l.in_size[2]};
  ForwardBackward run(layer, uniform(in, device, timing.seed, 1), timing.seed);
  return run.measure(timing).total_s() / (halve ? 2 : 1);
}

// A domain-parallel layer's work on its rank but the exchange (time_slabs), on a batch of
// `batch` own slabs: the received planes and returned gradients are stand-ins of their shapes.
double time_domain_layer(nn::DomainParallel& layer, const plan::LayerShape& l, int64_t batch, const Device& device,
                         const TimingOptions& timing) {
  const parallel::DepthHalo& h = layer.halo();
  const Tensor x =
      uniform(Shape{batch, l.in_channels, h.input.owned().size(), l.in_size[1], l.in_size[2]}, device, timing.seed, 1);
  std::vector<Tensor> received = parallel::plane_buffers(h.receives, x);
  std::vector<Tensor> returned = parallel::plane_buffers(h.sends, x);
  for (auto* buffers : {&received, &returned})
    for (Tensor& t : *buffers) ops::uniform_(t, -1.0f, 1.0f, ops::RandomKey(timing.seed, 3));
  nn::Module& inner = layer.layer();
  ForwardBackward run(
      [&](const Tensor& own) {
        const std::vector<Tensor> outgoing = parallel::planes_to_send(h, own);  // copied as if sent
        Tensor extended = parallel::assemble_own(h, own, layer.padding_value());
        parallel::place_received(h, received, extended);
        return inner.forward(extended);
      },
      [&](const Tensor& dy) {
        Tensor d_extended = inner.backward(dy);
        if (!d_extended.defined()) return d_extended;
        const std::vector<Tensor> outgoing = parallel::gradients_to_return(h, d_extended);  // as if sent
        Tensor dx = parallel::own_gradient(h, d_extended);
        parallel::add_returned(h, returned, dx);
        return dx;
      },
      x, device, timing.seed);
  return run.measure(timing).total_s();
}

// gamma starts at 0; make it nonzero so the values look like a trained layer's.
void nonzero_gammas(nn::Module& net) {
  for (auto& [name, p] : net.named_parameters())
    if (name.size() >= 5 && name.compare(name.size() - 5, 5, "gamma") == 0) ops::fill(p->value, 0.5);
}

}  // namespace

plan::ComputeTables time_layers(const RunOptions& options, const std::vector<int64_t>& batches,
                                const TimingOptions& timing) {
  GRIDNN_REQUIRE(!batches.empty(), "time_layers: give at least one batch");
  std::unique_ptr<nn::Module> net = build_model(options);
  net->to(options.device);
  net->train();
  nonzero_gammas(*net);
  const std::map<std::string, nn::Module*> by_name = modules_by_name(*net);
  plan::RankStep step;
  net->describe(Shape{1, options.in_channels, options.input[0], options.input[1], options.input[2]}, step);
  plan::ComputeTables tables;
  for (const plan::LayerShape& l : step.layers) {
    plan::ComputeTable& t = tables[l.name];
    t.forward_flops = l.forward_flops;
    for (int64_t b : batches) t.seconds[b] = time_layer(*by_name.at(l.name), l, b, options.device, timing);
  }
  return tables;
}

void time_slabs(const RunOptions& options, const parallel::GridShape& grid, const std::vector<int64_t>& batches,
                plan::ComputeTables& tables, const TimingOptions& timing) {
  GRIDNN_REQUIRE(!batches.empty(), "time_slabs: give at least one batch");
  if (grid.rows < 2) return;
  RunOptions o = options;
  o.halo = parallel::HaloMode::blocking;               // the same kernels; no exchange started inside the layer
  std::unique_ptr<nn::Module> whole = build_model(o);  // batch norm runs its own layer on the slab
  whole->to(o.device);
  whole->train();
  nonzero_gammas(*whole);
  const std::map<std::string, nn::Module*> whole_by_name = modules_by_name(*whole);
  const Shape sample{o.in_channels, o.input[0], o.input[1], o.input[2]};
  for (int r = 0; r < grid.rows; ++r) {
    PlannedModel planned = planned_model(o, grid, r);
    nn::Module& net = *planned.model;
    net.to(o.device);
    net.train();
    for (auto& [name, p] : net.named_parameters())  // built to describe itself: not initialized
      ops::uniform_(p->value, -0.1f, 0.1f, ops::RandomKey(timing.seed, 4));
    nonzero_gammas(net);
    const std::map<std::string, nn::Module*> by_name = modules_by_name(net);
    const plan::RankStep step = describe_step(net, {1, grid.rows, grid.cols}, r, 0, grid.cols, sample);
    for (const plan::LayerShape& l : step.layers) {
      const auto table = tables.find(l.name);
      GRIDNN_REQUIRE(table != tables.end(), "time_slabs: no whole table for layer ", l.name, " (time_layers first)");
      std::vector<plan::SlabTable>& slabs = table->second.slabs;
      const bool known =
          std::any_of(slabs.begin(), slabs.end(), [&](const plan::SlabTable& s) { return s.matches(l); });
      const bool whole_shape = l.forward_flops == table->second.forward_flops;  // past a switch to the batch split
      auto* domain = dynamic_cast<nn::DomainParallel*>(by_name.at(l.name));
      if (known || whole_shape || (!domain && l.kind != plan::LayerKind::bn)) continue;
      plan::SlabTable slab{l.in_size, l.out_size, l.forward_flops, {}};
      for (int64_t b : batches)
        slab.seconds[b] = domain ? time_domain_layer(*domain, l, b, o.device, timing)
                                 : time_layer(*whole_by_name.at(l.name), l, b, o.device, timing);
      slabs.push_back(std::move(slab));
    }
  }
}

}  // namespace gridnn::run
