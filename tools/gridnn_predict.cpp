// gridnn-predict: apply a trained ResAttNet3D to NIfTI scans; class probabilities, metrics
// when labelled, and 3D Grad-CAM heatmaps (models/predict/predict.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"
#include "core/enum_json.h"
#include "core/error.h"
#include "models/predict/predict.h"
#include "models/train/checkpoint.h"
#include "models/train/options.h"
#include "parallel/process_grid.h"
#include "parallel/progress_board.h"
#include "tools/cli.h"

namespace {

using namespace gridnn;

struct Cli {
  predict::PredictOptions p;
  run::RunOptions flags;  // only the flags given are applied over the checkpoint's options
  std::string checkpoint, input = "32x32x32";
  std::string device = "cpu", grid = "1x1";  // settled on each process (cli::process_device)
  std::string memory_limit;  // a size, or auto (cli::memory_limit); empty: none on the CPU, auto on a GPU
  cli::Attention attention = cli::Attention::both;
};

void add_flags(CLI::App& app, Cli& c) {
  auto& p = c.p;
  auto& o = c.flags;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto* ckpt = app.add_option("--checkpoint", c.checkpoint,
                              "a gridnn checkpoint, or a checkpoint folder (its newest); the network, input size "
                              "and data options default to the run's");
  app.add_option("--init-from", p.weights, "weights (safetensors with PyTorch names) instead of a checkpoint")
      ->check(CLI::ExistingFile)
      ->excludes(ckpt);
  app.add_option("--data", p.data, "a CSV manifest (path,label[,split]), a NIfTI file or a folder of them")->required();
  cli::add_enum_option(app, "--split", p.split, "manifest rows to predict")->capture_default_str();
  app.add_option("--out", p.out, "predictions CSV (metrics, ROC beside it)")->capture_default_str();
  auto* explain =
      app.add_option("--explain", p.explain_dir, "write Grad-CAM heatmaps (NIfTI in each scan's grid, PNG) here");
  app.add_option("--explain-layer", p.explain_layer,
                 "the layers explained: a block (att4), a group (layer3), a list (att3,att4), or NAME+ for it and "
                 "every block after it; several are fused (the mean of their normalized maps). Default: the last "
                 "attention block")
      ->needs(explain);
  cli::add_enum_option(app, "--explain-method", p.explain_method, "the class activation map")
      ->capture_default_str()
      ->needs(explain);
  app.add_option("--explain-tta", p.explain_tta,
                 "average the heatmap over N test-time transforms, mapped back exactly: the scan, its left-right "
                 "mirror, then small shifts (each with its mirror)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 10))
      ->needs(explain);
  app.add_option("--explain-mask", p.explain_mask,
                 "outline this region mask on each montage: a NIfTI file in the scan's own voxel grid, or a path "
                 "where {name} stands for the scan's name (masks/{name}_region.nii.gz)")
      ->needs(explain);
  app.add_option("--explain-class", p.explain_class, "the class to explain (default: each scan's predicted class)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
      ->needs(explain);

  app.add_option("--depth", o.resattnet.depth, "ResAttNet3D depth: 18 or 34")->check(CLI::IsMember({18, 34}));
  app.add_option("--width", o.resattnet.width, "ResAttNet3D width w")->check(CLI::Range(1, 4096));
  cli::add_enum_option(app, "--attention", c.attention, "self-attention after: both, layer3, layer4 or none");
  app.add_option("--input", c.input, "input volume size DxHxW");
  app.add_option("--in-channels", o.in_channels, "input channels")->check(CLI::Range(1, 1024));
  app.add_option("--classes", o.classes, "number of classes")->check(CLI::Range(2, 1 << 20));
  cli::add_enum_option(app, "--fit", o.data.fit, "NIfTI volumes to --input");
  cli::add_enum_option(app, "--orientation", o.data.orientation,
                       "canonical (RAS+, from sform, else qform) or native (the stored voxel order)");
  app.add_option("--spacing", o.data.spacing, "resample to this voxel size (mm) before fitting; 0: off")
      ->check(CLI::Range(0.0, 100.0));

  app.add_option("--batch", o.batch, "scans per batch")->check(CLI::Range(1, 1 << 20));
  app.add_option("--grid", c.grid, "process grid PrxPc (run under mpiexec -n Pr*Pc)")->capture_default_str();
  app.add_option("--device", c.device, "cpu, cuda or cuda:N")->capture_default_str();
  cli::add_enum_option(app, "--comm-backend", o.comm_backend, "communication")->capture_default_str();
  cli::add_enum_option(app, "--precision", o.precision, "GPU math")->capture_default_str();
  app.add_option("--comm-timeout", o.comm_timeout, "seconds a communication may wait; 0: forever")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--memory-limit", c.memory_limit,
                 "each rank's memory at most (6GiB, 512MiB, bytes, or auto: the device's free memory less a "
                 "margin, the default on a GPU): nothing runs when a rank's predicted peak is larger, and the "
                 "allocators enforce it");
  app.add_flag("--memory-report", p.memory_report,
               "at the end, each rank's predicted peak memory beside the allocator's measured peak and the "
               "largest holders (docs/design.md §6a)");
}

// The run's options, settled once on this process: the checkpoint's (or the defaults), then
// every flag given, then where and how it runs.
run::RunOptions settle(const CLI::App& app, Cli& c, const cli::Process& process) {
  run::RunOptions o;
  const bool from_checkpoint = !c.checkpoint.empty();
  if (from_checkpoint) {
    std::string path = c.checkpoint;
    GRIDNN_REQUIRE(std::filesystem::exists(path), "--checkpoint ", path, ": no such file or folder");
    if (std::filesystem::is_directory(path)) {
      auto newest = train::latest_checkpoint(path);
      GRIDNN_REQUIRE(newest, "--checkpoint ", path, ": the folder has no checkpoint");
      path = newest->path;
      o = train::options_from_json(newest->state.config_json);
    } else {
      o = train::options_from_json(train::read_checkpoint(path).state.config_json);
    }
    c.p.weights = path;
    GRIDNN_REQUIRE(o.model == run::Model::resattnet3d, "--checkpoint ", path, " holds a ", enum_name(o.model),
                   " model; gridnn-predict applies ResAttNet3D models to volumes");
  }
  GRIDNN_REQUIRE(!c.p.weights.empty(), "give the model: --checkpoint FILE|DIR or --init-from WEIGHTS");
  const run::RunOptions& f = c.flags;
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--depth")) o.resattnet.depth = f.resattnet.depth;
  if (given("--width")) o.resattnet.width = f.resattnet.width;
  if (given("--attention")) {
    cli::set_attention(c.attention, o.resattnet);
  }
  if (given("--input")) {
    const auto input = cli::parse_size("--input", c.input);
    o.input.assign(input.begin(), input.end());
  }
  if (given("--in-channels")) o.in_channels = f.in_channels;
  if (given("--classes")) o.classes = f.classes;
  // The way volumes are read: the training run's unless a flag says otherwise (then a warning,
  // as the network learnt the run's).
  auto data_flag = [&](const char* flag, auto& value, const auto& flag_value, const std::string& text) {
    if (!given(flag) || value == flag_value) return;
    if (from_checkpoint)
      std::fprintf(stderr, "gridnn-predict: warning: %s %s differs from the training run's %s\n", flag, text.c_str(),
                   nlohmann::json(value).dump().c_str());
    value = flag_value;
  };
  data_flag("--fit", o.data.fit, f.data.fit, enum_name(f.data.fit));
  data_flag("--orientation", o.data.orientation, f.data.orientation, enum_name(f.data.orientation));
  data_flag("--spacing", o.data.spacing, f.data.spacing, std::to_string(f.data.spacing));
  if (given("--batch")) o.batch = f.batch;
  // Where and how it runs: this command's, never the training run's.
  o.grid = parallel::GridShape::parse(c.grid);
  o.micro_batches = 1;
  o.placement.clear();
  o.device = cli::process_device(c.device, process);
  o.comm_backend = f.comm_backend;
  o.precision = f.precision;
  o.comm_timeout = f.comm_timeout;
  o.init_from.clear();
  o.model = run::Model::resattnet3d;
  o.memory_limit = cli::memory_limit(c.memory_limit, o.device, process);
  return o;
}

const char* const kDescription =
    "gridnn-predict: apply a trained ResAttNet3D to NIfTI scans.\n\n"
    "Examples:\n"
    "  gridnn-predict --checkpoint ckpt --data scans.csv --split test --out test.csv\n"
    "                 # probabilities per scan; with labels also loss, accuracy, sensitivity, specificity,\n"
    "                 # AUC, the confusion matrix (test_metrics.json) and the ROC curve (test_roc.csv/.png)\n"
    "  gridnn-predict --checkpoint ckpt --data scan.nii.gz --explain heat\n"
    "                 # heat/scan_gradcam.nii.gz (the scan's grid) and heat/scan_gradcam.png\n"
    "  gridnn-predict ... --explain heat --explain-method hirescam --explain-layer layer3+ --explain-tta 4\n"
    "                 # element-wise maps of layer3.0 to att4 fused; the scan, its mirror, a shift, its mirror\n"
    "  mpiexec -n 2 gridnn-predict --grid 2x1 ...   # each volume's depth split over 2 ranks\n";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription};
  Cli c;
  add_flags(app, c);
  CLI11_PARSE(app, argc, argv);
  return cli::run_mpi_program(&argc, &argv, [&](const cli::Process& process) {
    c.p.run = settle(app, c, process);
    run::validate(c.p.run);
    parallel::set_comm_timeout(c.p.run.comm_timeout);
    auto grid = cli::create_grid(c.p.run);
    const predict::PredictResult r = predict::predict(c.p, *grid, process.rank == 0 ? stdout : nullptr);
    if (process.rank == 0) {
      size_t heatmaps = 0;
      for (const auto& f : r.files)
        if (f.find("_gradcam.") == std::string::npos)
          std::printf("wrote %s\n", f.c_str());
        else
          heatmaps += f.size() > 7 && f.compare(f.size() - 7, 7, ".nii.gz") == 0;
      if (heatmaps > 0) std::printf("wrote %zu heatmaps into %s\n", heatmaps, c.p.explain_dir.c_str());
      if (r.failed > 0)
        std::fprintf(stderr, "gridnn-predict: %lld of %lld scans could not be read (listed in %s)\n",
                     static_cast<long long>(r.failed), static_cast<long long>(r.scans), c.p.out.c_str());
    }
    return r.failed > 0 ? 1 : 0;
  });
}
