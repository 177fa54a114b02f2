// How much of the gradient all-reduce hides behind backward (docs/design.md §4): a ResAttNet3D
// training step through run::PipelinedModel, with the gradient buckets all-reduced after
// backward (GradientSync::reduce) and overlapping it, alternating step by step in one run.
// Overlapping runs twice: with buckets in reverse registration order (a GradientSync made
// afresh each step), and as training runs it (one GradientSync kept, whose buckets follow
// the order backward finished the parameters after its first step). Per path it prints the
// mean per step (slowest rank) of:
//   backward   the backward pass (overlapped: with packing, starting and advancing buckets)
//   sync       the gradient synchronization after backward (blocking: all of it; overlapped:
//              the exposed wait in finish())
//   hidden     1 - exposed / total, total = the blocking path's sync
//
//   mpiexec -n 2 build/.../bench/bench_grad_overlap --grid 1x2 [--width 8] [--input 32]
//       [--batch 4] [--steps 6] [--bucket-kb 1024]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/data/synthetic.h"
#include "models/run/grid_batch.h"
#include "models/run/pipelined_model.h"
#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"

namespace {

using namespace gridnn;

struct Args {
  std::string grid = "1x2";
  int64_t width = 8, input = 32, batch = 4, steps = 6, bucket_kb = 1024;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--grid")
      a.grid = v;
    else if (k == "--width")
      a.width = std::atoll(v.c_str());
    else if (k == "--input")
      a.input = std::atoll(v.c_str());
    else if (k == "--batch")
      a.batch = std::atoll(v.c_str());
    else if (k == "--steps")
      a.steps = std::atoll(v.c_str());
    else if (k == "--bucket-kb")
      a.bucket_kb = std::atoll(v.c_str());
    else
      GRIDNN_REQUIRE(false, "bench_grad_overlap: unknown option ", k);
  }
  return a;
}

struct Sums {
  double backward = 0, sync = 0, in_backward = 0;
  int64_t steps = 0;
};

int body(MpiSession& mpi, int argc, char** argv) {
  const Args a = parse(argc, argv);
  auto grid = parallel::ProcessGrid::create(parallel::GridShape::parse(a.grid));
  run::RunOptions o;
  o.resattnet.width = a.width;
  o.classes = 3;
  o.input = {a.input, a.input, a.input};
  o.batch = a.batch;
  run::PipelinedModel net(o, *grid);
  run::PipelinedModel kept(o, *grid);  // the third path: one GradientSync for the whole run
  kept.set_gradient_sync(true, a.bucket_kb * 1024);
  data::SyntheticDataset d({a.batch, 0, 3, 1, Shape{a.input, a.input, a.input}, 7, 0.15f});
  data::LoaderOptions lo;
  lo.batch = a.batch;
  data::BatchLoader loader(d, run::shard_loader(lo, run::batch_shard(*grid, a.batch, a.input)));
  const data::Batch batch = loader.next();
  int64_t params = 0;
  for (auto& [name, p] : net.model().named_parameters()) params += p->value.numel();

  Sums sums[3];  // 0 blocking, 1 overlapped (registration order), 2 overlapped (backward order)
  int64_t buckets = 0, kept_buckets = 0;
  for (int64_t step = -1; step < a.steps; ++step) {  // step -1: warm-up of every path
    for (int path = 0; path < 3; ++path) {
      run::PipelinedModel& m = path == 2 ? kept : net;
      if (path < 2) net.set_gradient_sync(path == 1, a.bucket_kb * 1024);
      grid->world().barrier();
      Tensor logits;
      m.forward_backward(batch, a.batch, &logits);
      const auto& t = m.last_timing();
      Tensor worst = Tensor::from_vector(std::vector<float>{float(t.backward_seconds), float(t.sync_seconds),
                                                            float(m.gradient_sync().seconds_in_backward())},
                                         Shape{3});
      grid->world().all_reduce(worst, parallel::ReduceOp::max);
      (path == 2 ? kept_buckets : buckets) = m.gradient_sync().buckets();
      if (step < 0) continue;
      const float* w = static_cast<const float*>(worst.raw());
      Sums& s = sums[path];
      s.backward += w[0];
      s.sync += w[1];
      s.in_backward += w[2];
      ++s.steps;
    }
  }
  if (mpi.rank() == 0) {
    auto mean = [](double x, const Sums& s) { return 1e3 * x / double(std::max<int64_t>(s.steps, 1)); };
    const Sums& b = sums[0];
    const double total = mean(b.sync, b);
    std::printf(
        "grid %s (%d ranks), ResAttNet3D-18 width %lld, input %lld^3, batch %lld, %lld params "
        "(%.1f MB of gradients), %lld buckets of <= %lld KiB (%lld in backward order), "
        "%lld steps per path\n",
        a.grid.c_str(), mpi.size(), (long long)a.width, (long long)a.input, (long long)a.batch, (long long)params,
        double(params) * 4 / 1e6, (long long)buckets, (long long)a.bucket_kb, (long long)kept_buckets,
        (long long)a.steps);
    std::printf("%-18s %12s %12s %14s %8s %14s\n", "path", "backward ms", "sync ms", "bwd+sync ms", "hidden",
                "in-bwd work ms");
    std::printf("%-18s %12.1f %12.1f %14.1f %8s %14s\n", "blocking", mean(b.backward, b), total,
                mean(b.backward + b.sync, b), "0%", "-");
    const char* names[] = {"", "overlap, reg order", "overlap, bwd order"};
    for (int path = 1; path < 3; ++path) {
      const Sums& v = sums[path];
      const double exposed = mean(v.sync, v);
      std::printf("%-18s %12.1f %12.1f %14.1f %7.0f%% %14.1f\n", names[path], mean(v.backward, v), exposed,
                  mean(v.backward + v.sync, v), total > 0 ? 100.0 * (1.0 - exposed / total) : 0.0,
                  mean(v.in_backward, v));
    }
    std::printf("in-bwd work: packing, starting and advancing buckets inside backward\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gridnn::MpiSession::run(&argc, &argv, [&](gridnn::MpiSession& mpi) { return body(mpi, argc, argv); });
}
