// The training data's own cost: one synthetic sample (models/data/synthetic.h) generated on
// one thread, at the loader's shapes. The loader draws a batch on its background thread while
// the step runs, so on a 2-core machine every millisecond here is taken from the step's
// threads. Counter Mvox/s = million voxels generated per second.
//
//   OMP_NUM_THREADS=1 build/default/bench/bench_data
#include <string>

#include "bench/bench_main.h"
#include "models/data/synthetic.h"

namespace {
using namespace gridnn;

void synthetic_sample(benchmark::State& state, Shape size, bool augment) {
  data::SyntheticOptions o;
  o.samples = 64;
  o.size = size;
  const data::SyntheticDataset d(o);
  Tensor x = Tensor::empty(d.sample_shape());
  int64_t i = 0;
  for (auto _ : state) {
    d.load(i % o.samples, x, data::Augment{augment, 3, uint64_t(i / o.samples)});
    benchmark::DoNotOptimize(x.data<float>());
    ++i;
  }
  state.counters["Mvox/s"] =
      benchmark::Counter(double(x.numel()) * 1e-6, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

namespace gridnn::bench {

void register_benchmarks() {
  const std::pair<const char*, Shape> kShapes[] = {
      {"32^3", Shape{32, 32, 32}}, {"64^3", Shape{64, 64, 64}}, {"96x112x96", Shape{96, 112, 96}}};
  for (const auto& [name, size] : kShapes)
    for (bool augment : {false, true})
      register_guarded(std::string("synthetic/") + name + (augment ? "/augment" : ""), [size = size,
                                                                                        augment](benchmark::State& s) {
        synthetic_sample(s, size, augment);
      })->Unit(benchmark::kMillisecond);
}

}  // namespace gridnn::bench
