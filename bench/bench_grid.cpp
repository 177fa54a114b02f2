// Training-step speedup per grid shape (docs/design.md §6, §8): one Google Benchmark per
// factorization Pr x Pc of the job's P ranks (1 x P, pure batch, first), after the
// single-process run (1 x 1 on rank 0 while the others wait). Each runs a warm-up step, then
// `--steps` timed training steps (PipelinedModel::forward_backward + update): a step's time is
// the slowest rank's; the benchmark time (manual time, one iteration) is the median step.
//
//   mpiexec -n P bench_grid [--model resattnet3d|mlp] [--width W] [--input N] [--batch B]
//       [--steps S] [--hidden 256,64] [--alpha A] [--bandwidth BYTES_PER_S]
//       [--calibration FILE [--calibration-kind row]] [--batch-split-from BLOCK]
//       [--halo overlap|blocking] [benchmark flags]
//
// --batch-split-from BLOCK: grids with Pr > 1 switch to the batch split at that block's input
// (gridnn-train's flag; docs/design.md §4), the 1 x 1 run and the predictions alike.
// --halo: how depth-split convolutions meet their halo exchange (gridnn-train's flag).
//
// Counters (in the console table and in --benchmark_out=FILE --benchmark_out_format=json;
// only rank 0 reports):
//   step_s            median step (s); step_mean_s their mean
//   speedup_vs_1proc  the 1 x 1 run's step_s over this one's (0 when that run was filtered out)
//   speedup_vs_1xP    the 1 x P run's step_s over this one's
//   words_meas        received words per step, max over ranks, in the α–β convention of
//                     plan/cost_model.h, from every rank's CommLog (see count_step();
//                     the halo's received words from CommRecord::received)
//   words_pred        the same predicted: max over ranks of the words of the step the
//                     network describes there (models/run/step_plan.h)
//   words_exact       1 when the halo words were counted where they arrive (below), 0 when
//                     that count disagreed with the sends and the mirror rule stood in
//   comm_s_meas       CommLog seconds per step (waiting included), max over ranks, median
//   comm_s_pred       plan::estimate_ranks(...).comm_s() of those descriptions with --alpha
//                     and --bandwidth, or with the α and β of --calibration's kind
//   step_s_pred       with --calibration (a gridnn-calibrate file of the same model, input and
//                     local batches): the step the cost model predicts, the layers' measured
//                     times scaled to each rank's share plus that communication (0 without)
// The 1 x 1 run makes no calls (single-process layers): its words are 0. Speedups are over
// one process: with OMP_NUM_THREADS=1 that is one core, whatever the machine has.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_mpi.h"
#include "core/error.h"
#include "models/data/synthetic.h"
#include "models/run/grid_batch.h"
#include "models/run/pipelined_model.h"
#include "models/run/step_plan.h"
#include "parallel/communicator.h"
#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"
#include "plan/calibration.h"
#include "plan/cost_model.h"

namespace {

using namespace gridnn;

// ---- the bench's own flags ----------------------------------------------------------------

struct Config {
  run::Model model = run::Model::resattnet3d;
  int64_t width = 8, input = 32, batch = 8, steps = 5, classes = 2;
  std::vector<int64_t> hidden{256, 64};
  double alpha = 2e-6, bandwidth = 10e9;  // s per message, bytes per second
  std::string calibration, calibration_kind = "row";
  std::string batch_split_from;
  parallel::HaloMode halo = parallel::HaloMode::blocking;
  std::string describe() const {
    std::string s = enum_name(model);
    if (model == run::Model::mlp) {
      s += " hidden";
      for (int64_t h : hidden) s += " " + std::to_string(h);
    } else {
      s += " w" + std::to_string(width);
    }
    s += " in" + std::to_string(input) + " B" + std::to_string(batch);
    if (halo != parallel::HaloMode::blocking) s += std::string(" halo ") + enum_name(halo);
    return batch_split_from.empty() ? s : s + " batch-split-from " + batch_split_from;
  }
};

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const long long v = std::atoll(item.c_str());
    GRIDNN_REQUIRE(v > 0, "bench_grid: --hidden ", text, " is not a comma-separated list of positive sizes");
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// Removes the bench's flags ("--name value" or "--name=value") from argv; the rest goes to
// Google Benchmark. Ranks other than 0 also drop --benchmark_out*: only rank 0 writes.
Config take_flags(int* argc, char** argv, bool reporting) {
  Config c;
  const std::vector<std::string> own{"--model",
                                     "--width",
                                     "--input",
                                     "--batch",
                                     "--steps",
                                     "--hidden",
                                     "--alpha",
                                     "--bandwidth",
                                     "--calibration",
                                     "--calibration-kind",
                                     "--batch-split-from",
                                     "--halo"};
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (std::find(own.begin(), own.end(), name) == own.end()) {
      if (!reporting && arg.rfind("--benchmark_out", 0) == 0) continue;
      argv[kept++] = argv[i];
      continue;
    }
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      GRIDNN_REQUIRE(i + 1 < *argc, "bench_grid: ", name, " needs a value");
      value = argv[++i];
    }
    auto positive = [&](int64_t v) {
      GRIDNN_REQUIRE(v > 0, "bench_grid: ", name, " ", value, " must be a positive integer");
      return v;
    };
    if (name == "--model")
      c.model = parse_enum<run::Model>(value);
    else if (name == "--width")
      c.width = positive(std::atoll(value.c_str()));
    else if (name == "--input")
      c.input = positive(std::atoll(value.c_str()));
    else if (name == "--batch")
      c.batch = positive(std::atoll(value.c_str()));
    else if (name == "--steps")
      c.steps = positive(std::atoll(value.c_str()));
    else if (name == "--hidden")
      c.hidden = parse_list(value);
    else if (name == "--alpha")
      c.alpha = std::atof(value.c_str());
    else if (name == "--bandwidth")
      c.bandwidth = std::atof(value.c_str());
    else if (name == "--calibration")
      c.calibration = value;
    else if (name == "--calibration-kind")
      c.calibration_kind = value;
    else if (name == "--batch-split-from")
      c.batch_split_from = value;
    else if (name == "--halo")
      c.halo = parse_enum<parallel::HaloMode>(value);
  }
  *argc = kept;
  argv[kept] = nullptr;
  GRIDNN_REQUIRE(c.alpha >= 0 && c.bandwidth > 0, "bench_grid: --alpha must be >= 0 and --bandwidth > 0 (bytes/s)");
  return c;
}

// ---- the model's prediction ---------------------------------------------------------------

run::RunOptions options_of(const Config& c) {
  run::RunOptions o;
  o.model = c.model;
  o.resattnet.width = c.width;
  o.mlp_hidden = c.hidden;
  o.classes = c.classes;
  o.input = {c.input, c.input, c.input};
  o.batch = c.batch;
  o.batch_split_from = c.batch_split_from;
  o.halo = c.halo;
  return o;
}

struct Prediction {
  double words = 0;   // max over ranks of the words a rank receives
  double comm_s = 0;  // the α–β seconds (each call: the most any rank receives)
  double step_s = 0;  // with a calibration: its compute plus comm_s
};

// --alpha and --bandwidth, or the calibration's α, β of its kind and its layer times (read
// once; on one process the file has no communicators, and the flags' α and β stay).
const plan::Machine& machine_of(const Config& c) {
  static const plan::Machine m = [&] {
    plan::Machine base;
    base.alpha = c.alpha;
    base.beta = 4.0 / c.bandwidth;
    if (c.calibration.empty()) return base;
    const plan::Calibration cal = plan::read_calibration(c.calibration);
    return plan::machine_from(cal, cal.comm.empty() ? "" : c.calibration_kind, base);
  }();
  return m;
}

// From the network's own description of its step on every rank (models/run/step_plan.h).
Prediction predict(const Config& c, plan::Grid g) {
  const plan::Machine& m = machine_of(c);
  const std::vector<plan::RankStep> ranks = run::describe_grid(options_of(c), {1, g.rows, g.cols});
  Prediction p;
  for (const plan::RankStep& r : ranks) {
    double w = 0;
    for (const plan::CommCall& call : r.calls) w += call.words;
    p.words = std::max(p.words, w);
  }
  const plan::PlanCost cost = plan::estimate_ranks(ranks, g, m);
  p.comm_s = cost.comm_s();
  if (!c.calibration.empty()) p.step_s = cost.total_s();
  return p;
}

// ---- what the ranks counted ---------------------------------------------------------------

// One CommRecord, packed as 6 int64 for the all-gather of every rank's log.
enum Column { kComm, kOp, kLayer, kElements, kNanos, kReceived, kColumns };
// Communicators and operations by index (the pipe communicator: Ps = 1 here, one rank).
enum Comm : int64_t { kRow, kCol, kStage, kWorld, kPipe };
const std::vector<std::string> kComms{"row", "col", "stage", "world", "pipe"};
enum Op : int64_t { kAllReduce, kAllGather, kAllGatherv, kReduceScatter, kReduceScatterv, kBroadcast, kSendRecv };
const std::vector<std::string> kOps{"all_reduce",      "all_gather", "all_gatherv", "reduce_scatter",
                                    "reduce_scatterv", "broadcast",  "send_recv",   "barrier"};
constexpr int64_t kStepOp = -1;  // an extra row: the rank's step time (kNanos)

int64_t index_of(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  GRIDNN_REQUIRE(it != names.end(), "bench_grid: unknown communicator or operation \"", name,
                 "\" in the comm log; teach bench/bench_grid.cpp about it");
  return int64_t(it - names.begin());
}

int64_t layer_hash(const std::string& s) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return int64_t(h >> 1);
}

using Rows = std::vector<std::array<int64_t, kColumns>>;

// Every rank's records of one step (and its step time), on every rank.
std::vector<Rows> gather_logs(parallel::Communicator& world, double step_s) {
  std::vector<int64_t> mine;
  for (const parallel::CommRecord& r : parallel::comm_log().records())
    mine.insert(mine.end(), {index_of(kComms, r.comm), index_of(kOps, r.op), layer_hash(r.layer), r.elements,
                             int64_t(r.seconds * 1e9), r.received});
  mine.insert(mine.end(), {0, kStepOp, 0, 0, int64_t(step_s * 1e9), 0});
  const int64_t n = int64_t(mine.size()) / kColumns;
  parallel::comm_log().clear();
  Tensor count = Tensor::from_vector(std::vector<int64_t>{n}, Shape{1});
  Tensor counts = Tensor::empty(Shape{world.size()}, DType::i64);
  world.all_gather(count, counts);
  std::vector<int64_t> rows(counts.data<int64_t>(), counts.data<int64_t>() + world.size());
  int64_t total = 0;
  for (int64_t k : rows) total += k;
  Tensor in = Tensor::from_vector(mine, Shape{n, kColumns});
  Tensor out = Tensor::empty(Shape{total, kColumns}, DType::i64);
  world.all_gatherv(in, out, rows);
  parallel::comm_log().clear();  // the gathers themselves are not the step's
  std::vector<Rows> logs(size_t(world.size()));
  const int64_t* at = out.data<int64_t>();
  for (int w = 0; w < world.size(); ++w)
    for (int64_t i = 0; i < rows[size_t(w)]; ++i, at += kColumns) {
      std::array<int64_t, kColumns> row;
      std::copy(at, at + kColumns, row.begin());
      logs[size_t(w)].push_back(row);
    }
  return logs;
}

struct StepCount {
  double step_s = 0;  // the slowest rank's
  double comm_s = 0;  // the most CommLog seconds of a rank
  double words = 0;   // the most received words of a rank
  bool words_exact = true;
};

// The words world rank w received in the α–β convention of plan::CommCall (cost_model.h):
//   all_reduce       2(p−1)/p·n
//   all_gather(v)    the other members' blocks of the same call (the k-th gather on that
//                    communicator: collectives run in the same order on every member)
//   reduce_scatter   n(p−1)/p; reduce_scatterv: the whole input less this rank's block, the
//                    block it gave the layer's forward all_gatherv (Megatron's pairing)
//   send_recv        the halo elements it received (CommRecord::received);
//                    should those not add up to the elements sent over all ranks, the mirror
//                    rule stands in (a halo's backward sends back what its forward received, so
//                    a rank receives what it sends; wrong for a forward-only halo) and
//                    words_exact is false
//   broadcast        n(p−1)/p (unused by training); barrier 0
StepCount count_step(const std::vector<Rows>& logs, parallel::GridShape g) {
  StepCount s;
  const int P = g.rows * g.cols;
  auto group_of = [&](int w, int64_t comm) {
    const parallel::GridPosition at = parallel::ProcessGrid::position_of(g, w);
    std::vector<int> members;
    for (int q = 0; q < P; ++q) {
      const parallel::GridPosition other = parallel::ProcessGrid::position_of(g, q);
      const bool same_row = other.col == at.col;
      const bool same_col = other.row == at.row;
      const bool member = comm == kRow ? same_row : comm == kCol ? same_col : comm == kPipe ? q == w : true;
      if (member) members.push_back(q);
    }
    return members;
  };
  auto gathers = [&](int w, int64_t comm) {  // the blocks of w's all_gather(v) calls on comm
    std::vector<int64_t> out;
    for (const auto& r : logs[size_t(w)])
      if (r[kComm] == comm && (r[kOp] == kAllGather || r[kOp] == kAllGatherv)) out.push_back(r[kElements]);
    return out;
  };
  // The halo: elements received per rank, checked against the elements sent.
  std::vector<double> halo_received(size_t(P), 0.0), halo_sent(size_t(P), 0.0);
  double sent = 0, received = 0;
  for (int w = 0; w < P; ++w)
    for (const auto& r : logs[size_t(w)])
      if (r[kOp] == kSendRecv) {
        halo_sent[size_t(w)] += double(r[kElements]);
        halo_received[size_t(w)] += double(r[kReceived]);
        sent += double(r[kElements]);
        received += double(r[kReceived]);
      }
  if (received != sent) {
    halo_received = halo_sent;
    s.words_exact = false;
  }
  for (int w = 0; w < P; ++w) {
    double words = halo_received[size_t(w)], seconds = 0;
    std::map<int64_t, int> gather_at;                          // comm -> gathers seen
    std::map<std::pair<int64_t, int64_t>, int64_t> own_block;  // (comm, layer) -> last gather block
    for (const auto& r : logs[size_t(w)]) {
      if (r[kOp] == kStepOp) s.step_s = std::max(s.step_s, double(r[kNanos]) * 1e-9);
      if (r[kOp] < 0) continue;
      seconds += double(r[kNanos]) * 1e-9;
      const std::vector<int> group = group_of(w, r[kComm]);
      const double p = double(group.size()), n = double(r[kElements]);
      switch (r[kOp]) {
        case kAllReduce:
          words += 2 * (p - 1) / p * n;
          break;
        case kAllGather:
        case kAllGatherv: {
          const int k = gather_at[r[kComm]]++;
          for (int q : group)
            if (q != w) words += double(gathers(q, r[kComm]).at(size_t(k)));
          own_block[{r[kComm], r[kLayer]}] = r[kElements];
          break;
        }
        case kReduceScatter:
          words += n * (p - 1) / p;
          break;
        case kReduceScatterv: {
          const auto it = own_block.find({r[kComm], r[kLayer]});
          words += it != own_block.end() ? n - double(it->second) : n * (p - 1) / p;
          break;
        }
        case kBroadcast:
          words += n * (p - 1) / p;
          break;
        default:
          break;
      }
    }
    s.words = std::max(s.words, words);
    s.comm_s = std::max(s.comm_s, seconds);
  }
  return s;
}

// ---- the benchmarks -----------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Baselines {
  double one_proc_s = 0, one_by_p_s = 0;
};
Baselines& baselines() {
  static Baselines b;
  return b;
}

// A training step of `net` on `grid`; returns this rank's seconds.
double step(run::PipelinedModel& net, const data::Batch& batch, int64_t global_batch) {
  const auto start = std::chrono::steady_clock::now();
  Tensor logits;
  net.forward_backward(batch, global_batch, &logits);
  net.update(0.01);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `shape` on every rank of the job, or (one_proc) the 1 x 1 run on rank 0 alone.
void run_grid(benchmark::State& state, const Config& c, parallel::GridShape shape, bool one_proc, int job_procs) {
  const int procs = shape.size();
  if (c.batch < shape.cols || c.input < shape.rows) {  // every rank decides alike, no calls
    state.SkipWithError(("grid " + shape.str() + " needs --batch >= " + std::to_string(shape.cols) +
                         " and --input >= " + std::to_string(shape.rows))
                            .c_str());
    return;
  }
  // The job's grid (its world communicator carries the timing exchanges); the run's own
  // grid is that one, or for the 1 x 1 run a single-process grid on rank 0.
  auto job = parallel::ProcessGrid::create(one_proc ? parallel::GridShape{1, 1, job_procs} : shape);
  std::unique_ptr<parallel::ProcessGrid> own;
  parallel::Communicator& world = job->world();
  const bool active = !one_proc || world.rank() == 0;
  parallel::ProcessGrid* grid = job.get();
  if (one_proc && active) {
    own = parallel::ProcessGrid::single();
    grid = own.get();
  }
  const run::RunOptions o = options_of(c);
  std::unique_ptr<run::PipelinedModel> net;
  data::Batch batch;
  if (active) {
    net = std::make_unique<run::PipelinedModel>(o, *grid);
    data::SyntheticDataset d({c.batch, 0, c.classes, 1, Shape{c.input, c.input, c.input}, 7, 0.15f});
    data::LoaderOptions lo;
    lo.batch = c.batch;
    data::BatchLoader loader(d, run::shard_loader(lo, run::batch_shard(*grid, c.batch, c.input)));
    batch = loader.next();
  }
  std::vector<double> step_s, comm_s;
  StepCount counted;
  for (auto _ : state) {
    for (int64_t i = -1; i < c.steps; ++i) {  // step -1: warm-up
      world.barrier();
      parallel::comm_log().clear();
      const double mine = active ? step(*net, batch, c.batch) : 0.0;
      const StepCount s = count_step(gather_logs(world, mine), shape);
      if (i < 0) continue;
      step_s.push_back(s.step_s);
      comm_s.push_back(s.comm_s);
      counted = s;
    }
    state.SetIterationTime(median(step_s));
  }
  const double med = median(step_s);
  double mean = 0;
  for (double t : step_s) mean += t / double(step_s.size());
  Baselines& b = baselines();
  if (one_proc)
    b.one_proc_s = med;
  else if (shape.rows == 1)
    b.one_by_p_s = med;
  const Prediction p = predict(c, {shape.rows, shape.cols});
  state.counters["procs"] = procs;
  state.counters["step_s"] = med;
  state.counters["step_mean_s"] = mean;
  state.counters["speedup_vs_1proc"] = b.one_proc_s > 0 ? b.one_proc_s / med : 0;
  state.counters["speedup_vs_1xP"] = b.one_by_p_s > 0 && !one_proc ? b.one_by_p_s / med : 0;
  state.counters["words_meas"] = counted.words;
  state.counters["words_pred"] = p.words;
  state.counters["words_exact"] = counted.words_exact ? 1 : 0;
  state.counters["comm_s_meas"] = median(comm_s);
  state.counters["comm_s_pred"] = p.comm_s;
  state.counters["step_s_pred"] = p.step_s;
  state.SetLabel(c.describe() + " grid " + shape.str() + (one_proc ? " (1 process)" : ""));
}

int body(MpiSession& mpi, int argc, char** argv) {
  const Config c = take_flags(&argc, argv, mpi.rank() == 0);
  machine_of(c);  // a bad --calibration file fails here, before any step runs
  benchmark::Initialize(&argc, argv);
  GRIDNN_REQUIRE(!benchmark::ReportUnrecognizedArguments(argc, argv),
                 "bench_grid: see the options above (and --model, --width, --input, --batch, --steps, --hidden, "
                 "--alpha, --bandwidth, --calibration, --calibration-kind, --batch-split-from)");
  const int P = mpi.size();
  // Not guarded like the single-process benchmarks (bench/bench_main.h): a rank that skipped
  // a case after an exception would leave the others waiting in that case's collectives, so
  // an exception ends the whole job instead (MpiSession::run). Cases every rank refuses
  // alike call SkipWithError themselves (run_grid).
  auto add = [&](const std::string& name, parallel::GridShape shape, bool one_proc) {
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_grid(st, c, shape, one_proc, P); })
        ->Iterations(1)
        ->Repetitions(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  };
  const std::string prefix = "grid/" + std::string(enum_name(c.model)) + "/P" + std::to_string(P) + "/";
  add(prefix + "1x1", parallel::GridShape{1, 1, 1}, true);  // the baselines first
  for (int rows = 1; rows <= P; ++rows)
    if (P % rows == 0 && P > 1)
      add(prefix + std::to_string(rows) + "x" + std::to_string(P / rows), parallel::GridShape{1, rows, P / rows},
          false);
  return bench::run_benchmarks_reported_by_rank0(mpi.rank());
}

}  // namespace

int main(int argc, char** argv) {
  return gridnn::MpiSession::run(&argc, &argv, [&](gridnn::MpiSession& mpi) { return body(mpi, argc, argv); });
}
