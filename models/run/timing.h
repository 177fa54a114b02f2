// The one timing harness of gridnn: a forward and its backward run on a fixed input, timed
// with the device synchronized after each call. The cost model's calibration times each
// layer with it (time_layers, and time_slabs for the slabs of a grid's ranks), `--placement auto` each block of the
// network (profile_blocks, pipelined_model.h), and bench_layers its layers under Google Benchmark.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/layers/module.h"
#include "models/run/run_options.h"
#include "parallel/process_grid.h"
#include "plan/cost_model.h"

namespace gridnn::run {

struct TimingOptions {
  int warmup = 1;  // untimed rounds first
  int reps = 3;    // timed rounds; the medians are reported
  uint64_t seed = 1;
  // Bytes of another buffer read before each round (0: none), so that the layer starts from
  // caches other work has filled, as in a training step, not from its own last round's.
  int64_t evict_bytes = 0;
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

// The layers the ranks of `grid` run on depth slabs (Pr > 1), each shape that differs from
// the whole layer's timed forward + backward at each local batch of `batches` and added to
// its layer's table in `tables` (plan::SlabTable; every layer needs its whole table there,
// time_layers). What a rank does for the layer but move planes between ranks: for a
// convolution or pooling, the extended slab assembled from the own planes and the received
// ones, the wrapped layer on it, and dx of the own planes with the returned gradients added
// (parallel/halo.h's copies, DomainParallel without its exchange); for batch norm, the
// layer on the own planes (its sums' all-reduce is the model's communication). The other
// layers of a slab (attention, whose queries are the slab's but keys all positions) keep
// the whole table scaled by FLOPs.
void time_slabs(const RunOptions& options, const parallel::GridShape& grid, const std::vector<int64_t>& batches,
                plan::ComputeTables& tables, const TimingOptions& timing = {});

}  // namespace gridnn::run
