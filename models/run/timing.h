// The one timing harness of gridnn: a forward and its backward run on a fixed input, timed
// with the device synchronized after each call. The cost model's calibration times each
// layer with it (time_layers), `--placement auto` each block of the network
// (profile_blocks, pipelined_model.h), and bench_layers its layers under Google Benchmark.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/layers/module.h"
#include "models/run/run_options.h"
#include "plan/cost_model.h"

namespace gridnn::run {

struct TimingOptions {
  int warmup = 1;  // untimed rounds first
  int reps = 3;    // timed rounds; the medians are reported
  uint64_t seed = 1;
};

struct Timing {
  double forward_s = 0, backward_s = 0;  // medians over the timed rounds
  double total_s() const { return forward_s + backward_s; }
};

class ForwardBackward {
 public:
  using Step = std::function<Tensor(const Tensor&)>;
  // forward(x) -> y, then backward(dy) -> dx; dy is drawn once (uniform in [-1, 1), keyed by
  // `seed`) in the shape of the first forward's output. `x` lives on `device`.
  ForwardBackward(Step forward, Step backward, Tensor x, Device device, uint64_t seed = 1);
  // A module's forward and backward.
  ForwardBackward(nn::Module& module, const Tensor& x, uint64_t seed = 1);

  // One call each, the device synchronized after it; backward() needs a forward() first.
  Tensor forward();
  Tensor backward();
  // `warmup` untimed and `reps` timed rounds of forward then backward; the medians.
  Timing measure(const TimingOptions& options);

 private:
  Step forward_, backward_;
  Tensor x_, dy_;
  Device device_;
  uint64_t seed_;
};

// Every layer of the network `options` build on one process (its own description,
// nn::Module::describe), timed forward + backward at each local batch of `batches` on the
// options' device: the cost model's measured compute (plan::ComputeTables, by layer name,
// with each layer's forward FLOPs so that other shapes scale). Batch norm needs two values
// per channel: a one-voxel activation of one sample is timed at two and halved.
plan::ComputeTables time_layers(const RunOptions& options, const std::vector<int64_t>& batches,
                                const TimingOptions& timing = {});

}  // namespace gridnn::run
