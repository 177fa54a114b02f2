// Per-layer compute timing (layer_timing.h): build the module, time forward + backward.
#include "models/calibrate/layer_timing.h"

#include <chrono>
#include <memory>

#include "core/error.h"
#include "kernels/random.h"
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"
#include "plan/calibration.h"

namespace gridnn::calibrate {

namespace {

using plan::LayerKind;
using plan::LayerShape;

std::unique_ptr<nn::Module> build(const LayerShape& l) {
  switch (l.kind) {
    case LayerKind::conv: {
      auto conv = std::make_unique<nn::Conv3d>(l.in_channels, l.out_channels, l.kernel, l.stride, l.padding, false);
      conv->set_input_gradient(l.input_gradient);
      return conv;
    }
    case LayerKind::bn: return std::make_unique<nn::BatchNorm3d>(l.in_channels);
    case LayerKind::pool: return std::make_unique<nn::MaxPool3d>(l.kernel, l.stride, l.padding);
    case LayerKind::attention: return std::make_unique<nn::SelfAttention3d>(l.in_channels);
    case LayerKind::global_pool: return std::make_unique<nn::GlobalAvgPool3d>();
    case LayerKind::fc: return std::make_unique<nn::Linear>(l.in_channels, l.out_channels);
  }
  throw Error("time_layer: unknown layer kind");
}

Tensor random(const Shape& shape, uint64_t seed, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  ops::uniform_(t, -1.0f, 1.0f, ops::RandomKey(seed, stream));
  return t;
}

}  // namespace

double time_layer(const LayerShape& l, int64_t batch, const LayerTimingOptions& o) {
  GRIDNN_REQUIRE(batch >= 1, "time_layer ", l.name, ": batch must be >= 1, got ", batch);
  GRIDNN_REQUIRE(o.reps >= 1 && o.warmup >= 0, "time_layer: reps must be >= 1 and warm-up >= 0");
  // Batch norm in training mode needs two values per channel: a batch of one sample of one
  // voxel is timed at batch 2 and halved.
  if (l.kind == LayerKind::bn && batch * l.in_size[0] * l.in_size[1] * l.in_size[2] < 2)
    return time_layer(l, 2, o) / 2;
  std::unique_ptr<nn::Module> m = build(l);
  m->initialize(o.seed);
  for (auto& [name, p] : m->named_parameters())
    if (name == "gamma") ops::uniform_(p->value, 0.5f, 0.5f, ops::RandomKey(o.seed, 0));
  const Shape in = l.kind == LayerKind::fc
                       ? Shape{batch, l.in_channels}
                       : Shape{batch, l.in_channels, l.in_size[0], l.in_size[1], l.in_size[2]};
  const Tensor x = random(in, o.seed, 1);
  const Tensor dy = random(m->forward(x).shape(), o.seed, 2);  // an untimed forward for the shape
  std::vector<double> times;
  for (int i = -o.warmup; i < o.reps; ++i) {
    m->zero_grad();
    const auto start = std::chrono::steady_clock::now();
    m->forward(x);
    m->backward(dy);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= 0) times.push_back(s);
  }
  return plan::median(times);
}

plan::ComputeTables time_layers(const plan::Network& net, const std::vector<int64_t>& batches,
                                const LayerTimingOptions& o) {
  GRIDNN_REQUIRE(!batches.empty(), "time_layers: give at least one batch");
  plan::ComputeTables tables;
  for (const LayerShape& l : net.layers) {
    plan::ComputeTable& t = tables[l.name];
    t.forward_flops = l.forward_flops;
    for (int64_t b : batches) t.seconds[b] = time_layer(l, b, o);
  }
  return tables;
}

}  // namespace gridnn::calibrate
