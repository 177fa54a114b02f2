// gridnn-calibrate: measures the α–β cost model's parameters on the machine at hand and saves
// them as JSON for `gridnn-plan --calibration` (plan/calibration.h, docs/design.md §6):
//   - all-reduce, all-gather and reduce-scatter sweeps on the grid's row, col and world
//     communicators (halo exchanges on row too), ping-pong between world ranks 0 and 1; α, β
//     fitted per communicator kind ("row", "col", "world", "pingpong") where it has >= 2 ranks;
//   - each layer of the model timed forward+backward at each local batch (every rank at once,
//     as in training; the max over the ranks), and on a grid with rows each slab its rows run
//     (run::time_slabs: what the planner prices a rank's layer at on a grid like this one);
//     with --sweeps S, each time the median of S sweeps through them all; before each round
//     --evict MiB of another buffer are read (64 by default), so that a layer starts from caches that other
//     work filled, as it does in a training step.
// Rank 0 writes the file (atomically) and prints a summary table.
//
//   mpiexec -n 4 gridnn-calibrate --grid 2x2 --width 8 --input 32x32x32 --batches 1,2,4 --out calib.json
//   gridnn-plan --calibration calib.json --procs 32 --batch 256 --width 8 --input 32x32x32
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/run/step_plan.h"
#include "models/run/timing.h"
#include "parallel/process_grid.h"
#include "plan/calibration.h"
#include "tools/cli.h"

namespace {

using namespace gridnn;

struct Cli {
  std::string grid = "1x1", out, machine;
  cli::ModelFlags model;
  std::vector<int64_t> batches{1, 2, 4};
  std::vector<int64_t> sizes{1, 16, 256, 4096, 65536, 1048576};
  int reps = 10, layer_reps = 3, sweeps = 1;
  int64_t evict_mib = 64;
  bool no_layers = false;
};

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Every time of `tables` in one order, to read or to set.
template <typename Visit>
void for_each_time(plan::ComputeTables& tables, Visit visit) {
  for (auto& [name, t] : tables) {
    for (auto& [b, s] : t.seconds) visit(s);
    for (plan::SlabTable& slab : t.slabs)
      for (auto& [b, s] : slab.seconds) visit(s);
  }
}

// Each time the median of its values over the sweeps (each sweep times every layer and slab
// once more): a slow spell of a shared machine spoils one sweep's layers, not every median.
plan::ComputeTables median_over_sweeps(std::vector<plan::ComputeTables>& sweeps) {
  std::vector<std::vector<double>> values;
  for (plan::ComputeTables& t : sweeps) {
    values.emplace_back();
    for_each_time(t, [&](double& s) { values.back().push_back(s); });
  }
  plan::ComputeTables out = sweeps.front();
  size_t i = 0;
  for_each_time(out, [&](double& s) {
    std::vector<double> of_entry(values.size());
    for (size_t k = 0; k < values.size(); ++k) of_entry[k] = values[k][i];
    s = plan::median(of_entry);
    ++i;
  });
  return out;
}

// The max over the world of every layer's times (all ranks time the same layers, slabs and
// batches).
void max_over_world(plan::ComputeTables& tables, parallel::Communicator& world) {
  std::vector<float> v;
  for_each_time(tables, [&](double& s) { v.push_back(float(s)); });
  if (v.empty() || world.size() == 1) return;
  Tensor worst = Tensor::from_vector(v, Shape{int64_t(v.size())});
  world.all_reduce(worst, parallel::ReduceOp::max);
  const std::vector<float> w = worst.to_vector<float>();
  size_t i = 0;
  for_each_time(tables, [&](double& s) { s = double(w[i++]); });
}

int calibrate(const Cli& c, parallel::ProcessGrid& grid) {
  const bool root = grid.world_rank() == 0;
  plan::Calibration cal;
  cal.machine = c.machine.empty() ? host_name() : c.machine;
  cal.date = today_utc();
  cal.grid = grid.shape().str();
  cal.procs = grid.shape().size();
  const plan::TimingOptions timing{2, c.reps};

  // Communication: every rank runs the same sweeps in the same order.
  struct Kind {
    const char* name;
    parallel::Communicator* comm;
    std::vector<const char*> ops;
  };
  const std::vector<Kind> kinds{{"row", &grid.row(), {"all_reduce", "all_gather", "reduce_scatter", "halo"}},
                                {"col", &grid.col(), {"all_reduce", "all_gather", "reduce_scatter"}},
                                {"world", &grid.world(), {"all_reduce", "all_gather", "reduce_scatter"}},
                                {"pingpong", &grid.world(), {"pingpong"}}};
  for (const Kind& k : kinds) {
    if (k.comm->size() < 2) continue;
    if (root) std::fprintf(stderr, "gridnn-calibrate: timing %s (%d ranks)...\n", k.name, k.comm->size());
    std::vector<plan::CommSample> samples;
    for (const char* op : k.ops) {
      auto s = plan::time_comm_op(*k.comm, op, c.sizes, timing);
      samples.insert(samples.end(), s.begin(), s.end());
    }
    cal.comm[k.name] = plan::fit_per_op(samples);
  }

  // Compute: the model's layers at each local batch.
  if (!c.no_layers) {
    const run::RunOptions model = cli::model_options(c.model, c.batches.front());
    const plan::Network net = run::network_of(model);
    cal.model = net.name;
    if (model.model != run::Model::mlp)
      cal.model += ", width " + std::to_string(model.resattnet.width) + ", input " + c.model.input;
    if (root)
      std::fprintf(stderr, "gridnn-calibrate: timing %zu layers of %s at %zu batches...\n", net.layers.size(),
                   cal.model.c_str(), c.batches.size());
    run::TimingOptions layer_timing;
    layer_timing.reps = c.layer_reps;
    layer_timing.evict_bytes = c.evict_mib << 20;
    std::vector<plan::ComputeTables> sweeps;
    for (int s = 0; s < c.sweeps; ++s) {
      sweeps.push_back(run::time_layers(model, c.batches, layer_timing));
      if (grid.shape().rows > 1) {  // every rank times every row's slabs, all at once
        if (root && s == 0)
          std::fprintf(stderr, "gridnn-calibrate: timing the slabs of the %d rows...\n", grid.shape().rows);
        run::time_slabs(model, grid.shape(), c.batches, sweeps.back(), layer_timing);
      }
    }
    cal.compute = median_over_sweeps(sweeps);
    max_over_world(cal.compute, grid.world());
  }

  if (root) {
    plan::write_calibration(cal, c.out);
    std::printf("gridnn-calibrate: %s, grid %s (%d processes), %s -> %s\n", cal.machine.c_str(), cal.grid.c_str(),
                cal.procs, cal.date.c_str(), c.out.c_str());
    std::printf("%-9s %6s %8s %10s %14s %10s\n", "kind", "ranks", "samples", "alpha us", "bandwidth GB/s", "residual");
    for (const auto& [kind, f] : cal.comm)
      std::printf("%-9s %6d %8zu %10.2f %14.3f %9.1f%%\n", kind.c_str(), f.samples.front().procs, f.samples.size(),
                  f.alpha * 1e6, f.beta > 0 ? 4.0 / f.beta / 1e9 : 0.0, 100 * f.residual);
    if (cal.comm.empty()) std::printf("(one process: no communication measured)\n");
    if (!cal.compute.empty()) {
      double total = 0;
      for (const auto& [name, t] : cal.compute) total += t.seconds.begin()->second;
      std::printf("compute: %zu layers of %s, forward+backward at batch %lld: %.4f s in all\n", cal.compute.size(),
                  cal.model.c_str(), static_cast<long long>(c.batches.front()), total);
      size_t slabs = 0;
      for (const auto& [name, t] : cal.compute) slabs += t.slabs.size();
      if (slabs > 0) std::printf("slabs: %zu shapes the %s grid's rows run, timed as above\n", slabs, cal.grid.c_str());
    }
  }
  return 0;
}

const char* const kDescription =
    "gridnn-calibrate: measure alpha, beta (per communicator) and per-layer compute times on this "
    "machine for gridnn-plan --calibration.\n\n"
    "  mpiexec -n 4 gridnn-calibrate --grid 2x2 --width 8 --input 32x32x32 --out calib.json\n";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription};
  Cli c;
  app.add_option("--grid", c.grid, "process grid PrxPc (Pr*Pc = the number of processes)")->capture_default_str();
  cli::add_model_flags(app, c.model, false);
  app.add_option("--batches", c.batches, "local batches to time each layer at")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--sizes", c.sizes, "message sizes in 4-byte elements")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--reps", c.reps, "timed repetitions per message size (median)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--layer-reps", c.layer_reps, "timed repetitions per layer and batch (median)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--sweeps", c.sweeps,
                 "times every layer (and slab) is timed, each a sweep through them all; each time the median over "
                 "the sweeps (on a shared machine, 3 or more)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--evict", c.evict_mib,
                 "MiB of another buffer read before each round of a layer, so that it starts from caches other work "
                 "has filled, as "
                 "in a training step (0: from its own last round's, which predicts small layers up to 2x fast)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-layers", c.no_layers, "skip the per-layer compute timing");
  app.add_option("--machine", c.machine, "machine description stored in the file (default: host name)");
  app.add_option("--out", c.out, "the calibration file to write (JSON)")->required();
  CLI11_PARSE(app, argc, argv);
  return cli::run_mpi_program(&argc, &argv, [&](const cli::Process&) {
    auto grid = parallel::ProcessGrid::create(parallel::GridShape::parse(c.grid));
    return calibrate(c, *grid);
  });
}
