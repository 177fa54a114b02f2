// gridnn-train: train ResAttNet3D or an MLP on synthetic volumes or NIfTI files listed in
// a CSV manifest; checkpoints, resume, PyTorch weights in and out, single-step dumps.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/stop_signal.h"
#include "core/test_switches.h"
#include "models/run/grid_choice.h"
#include "models/run/step_plan.h"
#include "models/train/trainer.h"
#include "parallel/process_grid.h"
#include "parallel/progress_board.h"
#include "parallel/slurm.h"
#include "tools/cli.h"

namespace {

using namespace gridnn;

// The flags: the options they fill directly, and the settings settle() resolves on each
// process (run/run_options.h) before anything runs.
struct Cli {
  train::TrainOptions o;
  std::string input = "32x32x32";
  std::string device = "cpu";  // cpu, cuda or cuda:N (cli::process_device)
  std::string grid = "1x1";    // PrxPc, PsxPrxPc or auto (grid_of)
  int stages = 1;
  cli::Attention attention = cli::Attention::both;
  std::string batch_file, dump_step;
  double weight_decay = -1;
  std::string memory_limit;           // a size, or auto (cli::memory_limit); empty: none on the CPU, auto on a GPU
  CLI::Option* rank_order = nullptr;  // given or not: --grid auto chooses the order only when not
};

void add_flags(CLI::App& app, Cli& c) {
  auto& o = c.o;
  // A flag given twice takes its last value, so wrappers (scripts/run.sh) can set defaults
  // that the user's arguments, which come after them, override.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cli::add_enum_option(app, "--model", o.model, "network")->capture_default_str();
  app.add_option("--depth", o.resattnet.depth, "ResAttNet3D depth: 18 or 34")
      ->capture_default_str()
      ->check(CLI::IsMember({18, 34}));
  app.add_option("--width", o.resattnet.width, "ResAttNet3D width w (layer1 channels; layers have w, 2w, 4w, 8w)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cli::add_enum_option(app, "--attention", c.attention, "self-attention after: both, layer3, layer4 or none")
      ->capture_default_str();
  app.add_option("--mlp-hidden", o.mlp_hidden, "MLP hidden layer sizes")->capture_default_str()->delimiter(',');
  app.add_option("--input", c.input, "input volume size DxHxW")->capture_default_str();
  app.add_option("--in-channels", o.in_channels, "input channels")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--classes", o.classes, "number of classes")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--batch", o.batch, "samples per step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--epochs", o.epochs, "passes over the training set")->check(CLI::Range(0, 1 << 30));
  app.add_option("--steps", o.steps, "optimizer steps (wins over --epochs)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));

  cli::add_enum_option(app, "--optimizer", o.optimizer.kind, "optimizer")->capture_default_str();
  app.add_option("--lr", o.schedule.base_lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", o.optimizer.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", o.optimizer.nesterov, "SGD with Nesterov momentum");
  app.add_option("--weight-decay", c.weight_decay,
                 "L2 penalty (sgd, adam) or decoupled decay (adamw); default 0, adamw 0.01");
  cli::add_enum_option(app, "--schedule", o.schedule.kind, "learning-rate schedule")->capture_default_str();
  app.add_option("--warmup-steps", o.schedule.warmup_steps, "linear warm-up steps")->capture_default_str();
  app.add_option("--step-size", o.schedule.step_size, "step schedule: steps between decays")->capture_default_str();
  app.add_option("--gamma", o.schedule.gamma, "step schedule: decay factor")->capture_default_str();
  app.add_option("--min-lr", o.schedule.min_lr, "cosine schedule: final learning rate")->capture_default_str();

  app.add_option("--data", o.data.source,
                 std::string("'") + run::kSyntheticData + "' or a CSV manifest of NIfTI volumes (path,label[,split])")
      ->capture_default_str();
  app.add_option("--train-samples", o.data.train_samples, "synthetic training set size")->capture_default_str();
  app.add_option("--val-samples", o.data.val_samples, "synthetic validation set size")->capture_default_str();
  app.add_option("--val-fraction", o.data.val_fraction, "manifest rows without a split: share used for validation")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cli::add_enum_option(app, "--fit", o.data.fit, "NIfTI volumes to --input: crop (center crop / zero pad) or resample")
      ->capture_default_str();
  cli::add_enum_option(app, "--orientation", o.data.orientation,
                       "NIfTI voxel order: canonical (nibabel's closest RAS+ from the sform, else the qform) or "
                       "native (as stored)")
      ->capture_default_str();
  app.add_option("--spacing", o.data.spacing, "NIfTI: resample to voxels of MM mm on every axis before --fit (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_flag("!--no-augment", o.data.augment, "no random shifts, flips or noise in training");
  app.add_flag("--cache-data", o.data.cache,
               "keep the training samples in memory after their first load (needs --no-augment)");

  app.add_option("--grid", c.grid,
                 "process grid PrxPc: Pr ranks split each volume's depth, Pc split the batch; "
                 "run under mpiexec -n Pr*Pc; 'auto': the cost model's fastest grid")
      ->capture_default_str();
  app.add_option("--stages", c.stages, "pipeline stages Ps (the job then has Ps*Pr*Pc processes; GPipe schedule)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--micro-batches", o.micro_batches, "GPipe micro-batches per step (each stage's batch shard)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--placement", o.placement,
                 "where the stages cut the network: even (default), auto (GABRA on measured blocks) "
                 "or a placement file (gridnn-place --out)");
  app.add_option("--batch-split-from", o.batch_split_from,
                 "the block (layer3.0, att4, head, ...) from whose input each row splits the batch instead of "
                 "the depth: whole volumes of B/Pr samples per rank in the late layers; 'auto': the cost "
                 "model's choice (none if no switch is predicted faster)");
  cli::add_enum_option(app, "--halo", o.halo,
                       "how a depth-split convolution meets its halo exchange: blocking (wait, then compute) or "
                       "overlap (the slab's inner planes computed while the halo travels, its gradients sent back "
                       "during the weight gradient); the results are the same bit for bit")
      ->capture_default_str();
  app.add_flag("--comm-report", o.comm_report, "print the communication per layer at the end");
  app.add_flag("--profile", o.profile,
               "print rank 0's step time by kind of work (convolution, reorder, batch norm/ReLU, pooling, "
               "attention, optimizer, gradient sync, data wait), then every rank's per layer, at the end; "
               "steps after the first");
  app.add_option("--memory-limit", c.memory_limit,
                 "each rank's memory at most (6GiB, 512MiB, bytes, or auto: the device's free memory less a "
                 "margin, the default on a GPU): nothing runs when a rank's predicted peak is larger, and the "
                 "allocators enforce it; with --grid auto, the fastest grid that fits");
  cli::add_enum_option(app, "--recompute", o.recompute,
                       "activation recomputation: none, or blocks (the stem and each residual and attention block "
                       "keep only their input and run their forward again before their backward: less memory, "
                       "the same gradients)")
      ->capture_default_str();
  app.add_flag("--memory-report", o.memory_report,
               "print each rank's predicted and measured memory peak, and its largest holders, at the end");
  app.add_option("--device", c.device,
                 "cpu, cuda or cuda:N (cuda under mpiexec: each rank of a node its own GPU, round robin)")
      ->capture_default_str();
  cli::add_enum_option(app, "--comm-backend", o.comm_backend,
                       "communication: auto (NCCL for GPU tensors when each rank has its own GPU), mpi or nccl")
      ->capture_default_str();
  cli::add_enum_option(app, "--precision", o.precision, "GPU math for convolutions and GEMMs")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of initialization, data order and augmentation")->capture_default_str();

  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save checkpoints here (safetensors)");
  app.add_option("--save-every", o.save_every, "save every N steps (and at the end)")->capture_default_str();
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "how many checkpoints to keep")->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint-dir");
  app.add_option("--init-from", o.init_from, "start from these weights (safetensors with PyTorch names)")
      ->check(CLI::ExistingFile);
  cli::add_enum_option(app, "--save-errors", o.save_errors,
                       "a checkpoint that cannot be saved (disk full, read-only): stop (exit 1) or warn and train on")
      ->capture_default_str();
  cli::add_enum_option(app, "--on-signal", o.on_signal,
                       "SIGTERM, SIGINT or SIGUSR1 (on any rank): every rank finishes its step, then save-exit "
                       "(write a checkpoint, exit with --requeue-exit-code) or exit (no checkpoint, exit "
                       "128+signal); a second signal ends at once")
      ->capture_default_str();
  app.add_option("--requeue-exit-code", o.requeue_exit_code,
                 "exit status after a signal's checkpoint was saved (a batch script resubmits with --resume)")
      ->capture_default_str()
      ->check(CLI::Range(2, 125));
  app.add_option("--comm-timeout", o.comm_timeout,
                 "seconds one communication may wait for the other ranks before the job ends, naming the "
                 "operation and the ranks that had not arrived (exit 124); 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  c.rank_order =
      cli::add_enum_option(app, "--rank-order", o.rank_order,
                           "where grid positions run: rows-in-node (row groups on consecutive ranks, so model/domain "
                           "traffic stays in a node) or cols-in-node (column groups consecutive); see gridnn-plan "
                           "--nodes")
          ->capture_default_str();
  app.add_option("--metrics", o.metrics_path, "write one JSON line per step and per validation here");
  app.add_option("--eval-every", o.eval_every, "validate every N steps (default: every epoch)");
  app.add_flag("!--no-progress", o.progress, "no progress output");
  app.add_option("--log-every", o.log_every,
                 "read the training loss back every N steps, and before validation and checkpoints (default 10); "
                 "on a GPU a step reads nothing else back");

  app.add_option("--batch-file", c.batch_file, "single-step mode: batch with x f32 [B,C,D,H,W] and y i64 [B]")
      ->check(CLI::ExistingFile);
  app.add_option("--dump-step", c.dump_step, "single-step mode: write logits, loss, gradients, updated weights here")
      ->needs("--batch-file");
}

int train_or_dump(const Cli& c, const train::TrainOptions& o, parallel::ProcessGrid& grid) {
  if (!c.dump_step.empty()) {
    train::dump_step(o, c.batch_file, c.dump_step, &grid);
    if (grid.world_rank() == 0) std::printf("wrote %s\n", c.dump_step.c_str());
    return 0;
  }
  train::Trainer trainer(o, stdout, &grid);
  trainer.run();
  // Stopped by a signal: the requeue status when a checkpoint holds the work, else the
  // status of a process the signal ended.
  if (const auto& stop = trainer.stopped(); stop.signal != 0) {
    ignore_stop_signals();
    return stop.checkpoint.empty() ? 128 + stop.signal : o.requeue_exit_code;
  }
  return 0;
}

// The job's nodes when the launcher placed its ranks in equal blocks of consecutive ranks (as
// srun and mpiexec do): {nodes, ranks per node}; {1, procs} otherwise, where the grid is
// planned as on one node.
std::pair<int, int> node_blocks(const std::vector<int>& node_of_rank) {
  const int procs = int(node_of_rank.size());
  const int nodes = node_of_rank.empty() ? 1 : node_of_rank.back() + 1;
  if (nodes <= 1 || procs % nodes != 0) return {1, procs};
  for (int w = 0; w < procs; ++w)
    if (node_of_rank[size_t(w)] != w / (procs / nodes)) return {1, procs};
  return {nodes, procs / nodes};
}

// --grid as given, or (auto) the cost model's choice for the job's size and nodes (under
// Slurm, the allocation's), with the rank order unless --rank-order is given; --stages K makes
// it K x Pr x Pc (a PsxPrxPc grid gives the stages itself). `o`: the options settled so far.
std::pair<parallel::GridShape, parallel::RankOrder> grid_of(const Cli& c, const train::TrainOptions& o,
                                                            const cli::Process& process, bool report) {
  const int stages = c.stages;
  const int procs = process.size;
  parallel::GridShape shape;
  parallel::RankOrder order = o.rank_order;
  if (c.grid != "auto") {
    shape = parallel::GridShape::parse(c.grid);
  } else {
    GRIDNN_REQUIRE(procs % stages == 0, "--grid auto with --stages ", stages, " needs a multiple of ", stages,
                   " processes, the job has ", procs);
    // Stages split the nodes another way: with them, each stage is planned as on one node.
    const auto [nodes, per_node] = stages == 1 ? node_blocks(process.node_of_rank) : std::pair{1, procs / stages};
    std::optional<parallel::RankOrder> given;
    if (c.rank_order->count() > 0) given = o.rank_order;
    const run::GridChoice choice = run::choose_grid(o, nodes, per_node, given);
    shape = choice.shape;
    order = choice.order;
    if (report) {
      const auto slurm = parallel::slurm_allocation();
      std::printf("--grid auto%s%s: %s\n", slurm ? " in " : "", slurm ? slurm->str().c_str() : "", choice.why.c_str());
    }
  }
  if (stages > 1 && shape.stages == 1) shape.stages = stages;
  GRIDNN_REQUIRE(stages == 1 || shape.stages == stages, "--stages ", stages, " disagrees with --grid ", c.grid,
                 "; give the stages once");
  return {shape, order};
}

// The options of this process's run, settled once from the flags: the input size, the
// device, the memory limit, then the grid (auto weighs the others). Collective over the job
// (the memory limit's minimum).
train::TrainOptions settle(const Cli& c, const cli::Process& process) {
  train::TrainOptions o = c.o;
  const auto input = cli::parse_size("--input", c.input);
  o.input.assign(input.begin(), input.end());
  cli::set_attention(c.attention, o.resattnet);
  o.optimizer.weight_decay = c.weight_decay;
  if (o.steps == 0 && o.epochs == 0 && c.dump_step.empty()) o.epochs = 10;
  o.device = cli::process_device(c.device, process);
  o.memory_limit = cli::memory_limit(c.memory_limit, o.device, process);
  std::tie(o.grid, o.rank_order) = grid_of(c, o, process, process.rank == 0);
  if (o.batch_split_from == "auto") {
    // Compute at an assumed rate (what matters is its ratio to the communication): the
    // switch pays where a depth split leaves ranks unbalanced or gathers more than it saves.
    plan::Machine m;
    m.flops = 1e11;
    const run::BatchSplitChoice choice = run::choose_batch_split(o, {1, o.grid.rows, o.grid.cols}, m);
    o.batch_split_from = choice.block;
    if (process.rank == 0)
      std::printf("--batch-split-from auto: %s (predicted steps: %s)\n",
                  choice.block.empty() ? "none" : choice.block.c_str(), choice.why.c_str());
  }
  return o;
}

// gridnn-train's one test hook, for a full disk in a whole job under mpiexec, which no
// fault injected inside a test process can give (test/tools/cluster_runs.sh's full-disk case,
// docs/cluster.md): with GRIDNN_TEST_DISK_FULL_AFTER=N in the environment, every file the
// process writes (core/file_io.h: checkpoints, mostly) fails with ENOSPC once N of its bytes
// are written, as on a full device. Null without the variable.
std::unique_ptr<FileWriteOverride> full_disk_for_testing() {
  if (!test_switches().disk_full_after) return nullptr;
  const int64_t bytes = *test_switches().disk_full_after;
  return std::make_unique<FileWriteOverride>([bytes](int fd, const char* data, size_t size, size_t offset) -> ssize_t {
    if (offset >= size_t(bytes)) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, data, std::min(size, size_t(bytes) - offset));
  });
}

const char* const kDescription =
    "gridnn-train: train a 3D ResAttNet (or an MLP) on volumes.\n\n"
    "Examples:\n"
    "  gridnn-train --width 8 --epochs 10 --optimizer sgd --momentum 0.9 --lr 0.05 --schedule cosine\n"
    "                       # ResAttNet3D-18 on synthetic 32^3 volumes on the CPU: ~99% in ~30 s\n"
    "  gridnn-train --data scans.csv --input 96x112x96 --epochs 30 --checkpoint-dir ckpt\n"
    "  gridnn-train --checkpoint-dir ckpt --resume    # continue where the last run stopped\n"
    "  mpiexec -n 4 gridnn-train --grid 2x2 ...       # depth split over 2 ranks, batch over 2\n"
    "  sbatch examples/slurm/cpu.sbatch              # preemptible: SIGTERM saves, exit 75 requeues\n"
    "  mpiexec -n 4 gridnn-train --stages 2 --grid 1x2 --micro-batches 2 --placement auto ...\n"
    "  gridnn-train --init-from w.safetensors --batch-file b.safetensors --dump-step out.safetensors\n";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription};
  Cli c;
  add_flags(app, c);
  CLI11_PARSE(app, argc, argv);
  const auto full_disk = full_disk_for_testing();
  install_stop_signals();  // before MPI starts: a signal from now on waits for a step boundary
  return cli::run_mpi_program(&argc, &argv, [&](const cli::Process& process) {
    const train::TrainOptions o = settle(c, process);
    parallel::set_comm_timeout(o.comm_timeout);
    auto grid = cli::create_grid(o);
    if (process.size > 1 && process.rank == 0)
      std::printf("%s\n", grid->describe_placement(process.node_of_rank).c_str());
    return train_or_dump(c, o, *grid);
  });
}
