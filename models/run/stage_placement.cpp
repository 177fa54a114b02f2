// Where pipeline stages cut the network: an even split, a placement file, or GABRA on a
// measured block profile (pipelined_model.h).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "core/error.h"
#include "models/run/memory_plan.h"
#include "models/run/pipelined_model.h"
#include "models/run/timing.h"
#include "plan/gabra.h"

namespace gridnn::run {

plan::Placement even_placement(const nn::BlockNetwork& net, int stages) {
  const int blocks = int(net.block_count());
  GRIDNN_REQUIRE(stages >= 1 && stages <= blocks, "--stages ", stages, ": the network has ", blocks,
                 " blocks, so between 1 and ", blocks, " stages");
  plan::Placement p;
  p.blocks = net.block_names();
  for (int k = 0; k < stages; ++k) {
    p.first_block.push_back(int(parallel::balanced_range(blocks, stages, k).begin));
    p.device.push_back(k);
  }
  return p;
}

plan::Profile profile_blocks(const RunOptions& options, int64_t rows, int repeats) {
  // Batch norm needs two values per channel, which one sample of a 1-voxel activation (the
  // last stages) does not give: below two rows, measure two and halve.
  if (rows < 2) {
    plan::Profile p = profile_blocks(options, 2, repeats);
    for (plan::BlockProfile& b : p.blocks) {
      b.forward_s /= 2;
      b.backward_s /= 2;
      b.activation_bytes /= 2;
      b.stash_bytes /= 2;
    }
    return p;
  }
  std::unique_ptr<nn::Module> model = build_model(options);  // single-process layers
  const Device device = options.device;
  model->to(device);
  model->train();
  auto& net = dynamic_cast<nn::BlockNetwork&>(*model);
  const size_t n = net.block_count();
  // A random-free input: every voxel 0.5 (only the times and sizes matter).
  const Shape shape{rows, options.in_channels, options.input[0], options.input[1], options.input[2]};
  const Tensor x = Tensor::from_vector(std::vector<float>(size_t(shape.numel()), 0.5f), shape).to(device);

  plan::Profile profile;
  profile.micro_batches = 1;
  profile.blocks.resize(n);
  // Each block on the output of the ones before it, timed forward then backward by the
  // timing harness (timing.h).
  TimingOptions timing;
  timing.reps = repeats;
  std::vector<Tensor> inputs{x};
  for (size_t i = 0; i < n; ++i) {
    ForwardBackward run([&net, i](const Tensor& in) { return net.forward_block(i, in); },
                        [&net, i](const Tensor& dy) { return net.backward_block(i, dy); }, inputs.back(), device);
    const Timing t = run.measure(timing);
    inputs.push_back(run.forward());
    profile.blocks[i].forward_s = t.forward_s;
    profile.blocks[i].backward_s = t.backward_s;
  }
  // The bytes as the memory model counts them (plan/memory_model.h, docs/design.md §6a): what
  // each block's layers keep per micro-batch until their backward, and its output; its
  // parameters, their gradients and the optimizer's state.
  Shape at = shape;
  for (size_t i = 0; i < n; ++i) {
    plan::BlockProfile& b = profile.blocks[i];
    b.name = net.blocks()[i].name;
    plan::RankStep described;
    at = net.describe_block(i, at, described);
    b.activation_bytes = double(nn::activation_bytes(at));
    b.stash_bytes = double(plan::forward_held_bytes(described.memory));
    double parameter_bytes = 0;
    for (auto& [name, p] : model->named_parameters())
      if (net.block_of(name) == i) parameter_bytes += double(p->value.numel()) * 4;
    b.memory_bytes = parameter_bytes * double(2 + optimizer_copies(options.optimizer));
  }
  return profile;
}

plan::Placement choose_placement(const RunOptions& options, const nn::BlockNetwork& net, parallel::ProcessGrid& grid) {
  const int stages = grid.shape().stages;
  const std::optional<PlacementRule> rule = placement_rule(options);
  if (rule == PlacementRule::even) return even_placement(net, stages);
  if (!rule) {
    plan::Placement p = plan::read_placement(options.placement);
    plan::validate(p, int(net.block_count()), stages, net.block_names());
    GRIDNN_REQUIRE(p.partitions() == stages, "--placement ", options.placement, " has ", p.partitions(),
                   " partitions, but the run has ", stages, " stages (--stages or --grid PsxPrxPc)");
    return p;
  }
  // auto: the first rank measures and searches; everyone receives the cuts and devices (and,
  // in the last element, whether the first rank failed: then every rank stops alike).
  Tensor cuts = Tensor::zeros(Shape{2 * int64_t(stages) + 1}, DType::i64);
  std::string failure;
  if (grid.world_rank() == 0) {
    try {
      const int64_t rows = std::max<int64_t>(1, options.batch / grid.shape().cols / options.micro_batches);
      plan::Profile profile = profile_blocks(options, rows);
      profile.micro_batches = options.micro_batches;
      profile.recompute = true;  // the step re-runs the forward of all micro-batches but the last
      const plan::Cluster cluster = plan::uniform_cluster(stages, 2e-6, 10e9);
      plan::GaOptions ga;
      ga.seed = options.seed;
      const plan::SearchResult best = plan::gabra(profile, cluster, stages, ga);
      for (int k = 0; k < stages; ++k) {
        cuts.data<int64_t>()[k] = best.placement.first_block[size_t(k)];
        cuts.data<int64_t>()[stages + k] = best.placement.device[size_t(k)];
      }
    } catch (const std::exception& e) {
      failure = e.what();
      std::fprintf(stderr, "gridnn: --placement auto: profiling failed: %s\n", e.what());
      std::fflush(stderr);
      cuts.data<int64_t>()[2 * stages] = 1;
    }
  }
  grid.world().broadcast(cuts, 0);
  GRIDNN_REQUIRE(cuts.data<int64_t>()[2 * stages] == 0, "--placement auto: profiling the blocks on rank 0 failed",
                 failure.empty() ? std::string(" (its message is on rank 0's output)") : ": " + failure,
                 "; give a placement file or --placement even");
  plan::Placement p;
  p.blocks = net.block_names();
  for (int k = 0; k < stages; ++k) {
    p.first_block.push_back(int(cuts.data<int64_t>()[k]));
    p.device.push_back(int(cuts.data<int64_t>()[stages + k]));
  }
  plan::validate(p, int(net.block_count()), stages, p.blocks);
  return p;
}

}  // namespace gridnn::run
