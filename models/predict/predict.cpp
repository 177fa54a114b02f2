// gridnn-predict's work (predict.h), in its steps: the scans and the model; which scans can
// be read; the logits (and heatmaps) batch by batch; the first rank's files.
#include "models/predict/predict.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>

#include "core/bytes.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/png.h"
#include "models/data/nifti_dataset.h"
#include "models/data/nifti_volume.h"
#include "models/data/orientation.h"
#include "models/explain/explanation.h"
#include "models/explain/montage.h"
#include "models/explain/region_mask.h"
#include "models/predict/reports.h"
#include "models/run/grid_batch.h"
#include "models/run/memory_limit.h"
#include "models/run/pipelined_model.h"

namespace gridnn::predict {

namespace fs = std::filesystem;

namespace {

void check(const PredictOptions& o, const parallel::ProcessGrid& grid) {
  GRIDNN_REQUIRE(grid.shape().stages == 1, "gridnn-predict runs on one pipeline stage: give --grid PrxPc, not ",
                 grid.shape().str());
  GRIDNN_REQUIRE(o.run.model == run::Model::resattnet3d, "gridnn-predict needs a ResAttNet3D model (volumes in)");
  GRIDNN_REQUIRE(o.run.batch >= 1, "--batch must be at least 1");
  GRIDNN_REQUIRE(o.explain_tta >= 1, "--explain-tta ", o.explain_tta,
                 ": give at least 1 transform (1: the scan itself; 2 adds its mirror image; more add shifts)");
  GRIDNN_REQUIRE(o.explain_class < o.run.classes, "--explain-class ", o.explain_class,
                 " is not a class of this model (", o.run.classes, " classes: 0 to ", o.run.classes - 1, ")");
}

// The scans as the training's validation reads them (unlabelled scans get label 0 there).
data::NiftiDataset scan_dataset(const std::vector<ScanEntry>& scans, const PredictOptions& o) {
  data::Manifest manifest{o.data, {}};
  for (const ScanEntry& s : scans)
    manifest.rows.push_back({s.path, std::max<int64_t>(s.label, 0), data::Split::unassigned, s.line});
  return data::NiftiDataset(std::move(manifest), run::nifti_dataset_options(o.run));
}

struct Readable {
  std::vector<int64_t> scans;       // the readable scans' indices, in order
  std::vector<std::string> errors;  // per scan: empty when readable; the first rank's messages
  int64_t failed = 0;
};

// Which scans can be read: every rank tries its share, then all agree. The first rank reads
// each failed scan again for its message.
Readable find_readable(const data::NiftiDataset& dataset, size_t count, parallel::ProcessGrid& grid) {
  const int world = grid.world().size();
  Tensor failed = Tensor::zeros(Shape{int64_t(count)});
  for (size_t i = size_t(grid.world_rank()); i < count; i += size_t(world)) {
    try {
      dataset.load_scan(int64_t(i));
    } catch (const std::exception&) {
      failed.data<float>()[i] = 1.0f;
    }
  }
  grid.world().all_reduce(failed);
  Readable r;
  r.errors.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (failed.data<float>()[i] == 0.0f) {
      r.scans.push_back(int64_t(i));
      continue;
    }
    ++r.failed;
    if (grid.world_rank() != 0) continue;
    try {
      dataset.load_scan(int64_t(i));
      r.errors[i] = "could not be read on another rank";
    } catch (const std::exception& e) {
      r.errors[i] = e.what();
    }
    std::fprintf(stderr, "gridnn-predict: skipped %s\n", r.errors[i].c_str());
  }
  return r;
}

// The voxel size (mm) of the network's input along d, h, w: what one network voxel spans in
// the stored grid, in the stored voxels' sizes (zooms are along i, j, k = stored w, h, d).
std::array<double, 3> network_spacing(const data::Scan& scan) {
  const std::array<double, 3> stored{scan.stored.zooms[2], scan.stored.zooms[1], scan.stored.zooms[0]};
  std::array<double, 3> s{};
  for (int a = 0; a < 3; ++a) {
    double mm2 = 0;
    for (int t = 0; t < 3; ++t) mm2 += std::pow(scan.to_stored[size_t(t)][size_t(a)] * stored[size_t(t)], 2);
    s[size_t(a)] = mm2 > 0 ? std::sqrt(mm2) : 1.0;
  }
  return s;
}

// The heatmaps' settings for a run with --explain.
struct Explanations {
  std::string dir;
  explain::ExplainOptions options;
  std::string mask;                // a region mask file, "{name}" standing for the scan's name; empty: none
  std::vector<std::string> names;  // per scan (explanation_names)
  bool canonical = false;          // volumes in RAS+ order: the montage may letter its axes
};

// The mask file of scan `name`: every "{name}" in `pattern` replaced by it.
std::string mask_path(std::string pattern, const std::string& name) {
  for (size_t at = pattern.find("{name}"); at != std::string::npos; at = pattern.find("{name}", at + name.size()))
    pattern.replace(at, 6, name);
  return pattern;
}

// Writes a scan's heatmap `heat` (network space, [0, 1]; NIfTI in its stored grid, PNG
// montage) as <dir>/<name>_gradcam.*; returns the files.
std::vector<std::string> write_explanation(const Explanations& e, const std::string& name, const data::Scan& scan,
                                           const Tensor& heat, bool flat, int64_t cls) {
  if (flat)
    std::fprintf(stderr,
                 "gridnn-predict: %s: the %s map of class %lld is zero everywhere (no positive "
                 "evidence at these layers); its heatmap is all zeros\n",
                 scan.stored.path.c_str(), enum_name(e.options.method), static_cast<long long>(cls));
  const std::string stem = (fs::path(e.dir) / name).string() + "_gradcam";
  data::write_nifti_like(stem + ".nii.gz", data::map_to_stored(heat, scan.to_stored, scan.stored.dims),
                         scan.stored.path);
  const bool letters = e.canonical && scan.stored.source != data::AffineSource::none;
  const Tensor region = e.mask.empty() ? Tensor() : explain::region_in_network_space(mask_path(e.mask, name), scan);
  write_png(stem + ".png", explain::render_montage(scan.volume, heat, explain::peak_voxel(heat), network_spacing(scan),
                                                   0, letters, region));
  return {stem + ".nii.gz", stem + ".png"};
}

// The logits [readable scans, classes] of every rank, batch by batch: each rank takes its
// shard's rows and planes as training does (grid_batch.h); the last batch may be short. With
// `explanations`, the first row rank of each batch shard writes its scans' heatmaps into `files`.
Tensor predict_batches(const PredictOptions& o, const data::NiftiDataset& dataset, const std::vector<int64_t>& good,
                       run::PipelinedModel& model, const Explanations* explanations, parallel::ProcessGrid& grid,
                       std::vector<std::string>& files) {
  const std::array<int64_t, 3> input{o.run.input[0], o.run.input[1], o.run.input[2]};
  const parallel::Range depth = run::shard_planes(grid.shape(), grid.row_rank(), input[0]);
  const int64_t classes = o.run.classes;
  Tensor all_logits = Tensor::empty(Shape{int64_t(good.size()), classes});
  for (size_t start = 0; start < good.size(); start += size_t(o.run.batch)) {
    const int64_t rows = std::min<int64_t>(o.run.batch, int64_t(good.size() - start));
    const parallel::Range mine = run::shard_rows(grid.shape(), grid.col_rank(), rows);
    std::vector<data::Scan> local;
    data::Batch batch;
    batch.x = Tensor::empty(Shape{mine.size(), 1, depth.size(), input[1], input[2]});
    batch.y = Tensor::zeros(Shape{mine.size()}, DType::i64);
    for (int64_t k = 0; k < mine.size(); ++k) {
      local.push_back(dataset.load_scan(good[start + size_t(mine.begin + k)]));
      batch.x.narrow(k, 1).copy_from(
          local.back().volume.narrow(depth.begin, depth.size()).reshape(Shape{1, 1, depth.size(), input[1], input[2]}));
    }
    Tensor logits = Tensor::empty(Shape{0, classes});
    if (mine.size() > 0 && explanations) {
      Tensor volumes = Tensor::empty(Shape{mine.size(), input[0], input[1], input[2]});
      for (int64_t k = 0; k < mine.size(); ++k)
        volumes.narrow(k, 1).copy_from(local[size_t(k)].volume.reshape(Shape{1, input[0], input[1], input[2]}));
      auto& net = dynamic_cast<nn::BlockNetwork&>(model.model());
      const explain::BatchExplanation e =
          explain::explain_batch(model.model(), net, volumes, depth, model.device(), explanations->options, grid.row());
      logits = e.logits;
      for (int64_t k = 0; grid.row_rank() == 0 && k < mine.size(); ++k) {
        const Tensor heat = e.heat.narrow(k, 1).reshape(Shape{input[0], input[1], input[2]});
        const size_t index = size_t(good[start + size_t(mine.begin + k)]);
        for (auto& f : write_explanation(*explanations, explanations->names[index], local[size_t(k)], heat,
                                         e.flat[size_t(k)], e.target[size_t(k)]))
          files.push_back(std::move(f));
      }
    } else if (mine.size() > 0) {
      model.evaluate(batch, &logits);
      logits = logits.to(Device::cpu());
    }
    all_logits.narrow(int64_t(start), rows).copy_from(run::gather_rows(grid, logits));
  }
  return all_logits;
}

// ", gradcam++ of layer3.0 and att4 over 4 transforms into DIR"
std::string explained_text(const Explanations& e, const nn::BlockNetwork& net) {
  std::string layers;
  for (size_t i = 0; i < e.options.layers.size(); ++i)
    layers += (i == 0                             ? ""
               : i + 1 == e.options.layers.size() ? " and "
                                                  : ", ") +
              net.blocks()[e.options.layers[i]].name;
  const std::string over =
      e.options.tta > 1 ? " over " + std::to_string(e.options.tta) + " test-time transforms" : std::string();
  return ", " + std::string(enum_name(e.options.method)) + " of " + layers + over + " into " + e.dir;
}

run::MemoryJob memory_job(const PredictOptions& o) {
  return o.explain_dir.empty() ? run::MemoryJob::prediction : run::MemoryJob::explanation;
}

// The job the memory model predicts: the network, and the weights it reads at setup.
run::RunOptions memory_options(const PredictOptions& o) {
  run::RunOptions r = o.run;
  r.init_from = o.weights;
  return r;
}

// This rank's predicted peak for this job (models/run/memory_plan.h).
plan::MemoryPeak predicted_memory(const PredictOptions& o, run::PipelinedModel& model, parallel::ProcessGrid& grid) {
  const run::StageSpan whole{0, dynamic_cast<nn::BlockNetwork&>(model.model()).block_count(), true, true};
  return plan::simulate_memory(run::memory_step(memory_options(o), model.model(), grid.shape(), grid.row_rank(),
                                                grid.col_rank(), whole, memory_job(o)));
}

// --memory-limit's pre-flight check for this job, before any scan is read or any file
// written; what would fit: other grids, a smaller batch.
void check_memory(const PredictOptions& o, const plan::MemoryPeak& own, run::PipelinedModel& model,
                  parallel::ProcessGrid& grid) {
  const int64_t limit = o.run.memory_limit;
  if (limit <= 0) return;
  const run::MemoryJob job = memory_job(o);
  const parallel::GridShape g = grid.shape();
  run::enforce_memory_limit(limit, model.device(), grid, own, [&] {
    std::vector<std::string> fits = run::grids_that_fit(memory_options(o), g, limit, job);
    for (int64_t b = o.run.batch - 1; b >= 1; --b) {
      run::RunOptions t = memory_options(o);
      t.batch = b;
      if (const int64_t peak = run::largest_peak(run::predict_grid_memory(t, g, job)); peak <= limit) {
        fits.push_back("--batch " + std::to_string(b) + " (" + format_bytes(peak) + ")");
        break;
      }
    }
    return run::what_fits_text(fits);
  });
}

}  // namespace

PredictResult predict(const PredictOptions& o, parallel::ProcessGrid& grid, std::FILE* out) {
  check(o, grid);
  const bool leader = grid.world_rank() == 0;
  const std::vector<ScanEntry> scans = list_scans(o.data, o.split);
  const data::NiftiDataset dataset = scan_dataset(scans, o);
  PredictResult result;
  result.scans = int64_t(scans.size());
  result.labelled = std::all_of(scans.begin(), scans.end(), [](const ScanEntry& s) { return s.label >= 0; });

  // The model: the checkpoint's or the weights' tensors (a mismatch lists them).
  run::RunOptions weights = o.run;
  weights.init_from = o.weights;
  run::PipelinedModel model(weights, grid);
  auto* net = dynamic_cast<nn::BlockNetwork*>(&model.model());
  GRIDNN_REQUIRE(net, "gridnn-predict: the model is not made of blocks");
  const plan::MemoryPeak own = predicted_memory(o, model, grid);
  check_memory(o, own, model, grid);
  std::optional<Explanations> explanations;
  if (!o.explain_dir.empty()) {
    explanations =
        Explanations{o.explain_dir,
                     {o.explain_method, explain::parse_layers(*net, o.explain_layer), o.explain_tta, o.explain_class},
                     o.explain_mask,
                     explanation_names(scans),
                     o.run.data.orientation == data::Orientation::canonical};
    if (grid.row_rank() == 0) fs::create_directories(o.explain_dir);
  }
  if (leader && fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path());
  if (out)
    std::fprintf(out, "predicting %zu scan%s on %s, grid %s%s\n", scans.size(), scans.size() == 1 ? "" : "s",
                 model.device().str().c_str(), grid.shape().str().c_str(),
                 explanations ? explained_text(*explanations, *net).c_str() : "");

  const Readable readable = find_readable(dataset, scans.size(), grid);
  result.failed = readable.failed;
  result.logits =
      predict_batches(o, dataset, readable.scans, model, explanations ? &*explanations : nullptr, grid, result.files);
  result.predicted_peak_bytes = own.peak_bytes;
  result.measured_peak_bytes = run::measured_peak_bytes(model.device());
  if (o.memory_report) {  // every rank's numbers (collective), printed by the first
    const std::vector<int64_t> measured = run::per_rank(grid, result.measured_peak_bytes);
    const std::vector<int64_t> predicted = run::per_rank(grid, own.peak_bytes);
    const std::vector<std::string> blocks =
        run::per_rank(grid, run::memory_report(grid.world_rank(), own, result.measured_peak_bytes));
    std::string text = run::memory_report_title(model.device());
    std::string exact = "memory in bytes:";
    for (size_t r = 0; r < measured.size(); ++r) {
      text += blocks[r];
      exact += " rank " + std::to_string(r) + " predicted " + std::to_string(predicted[r]) + " measured " +
               std::to_string(measured[r]) + (r + 1 < measured.size() ? ";" : "\n");
    }
    if (out) std::fprintf(out, "%s%s", text.c_str(), exact.c_str());
  }

  // The files, on the first rank.
  if (!leader) return result;
  write_file_atomically(o.out, predictions_csv(scans, readable.errors, result.logits));
  result.files.push_back(o.out);
  if (!result.labelled || readable.scans.empty()) return result;
  Tensor labels = Tensor::empty(Shape{int64_t(readable.scans.size())}, DType::i64);
  for (size_t g = 0; g < readable.scans.size(); ++g) labels.data<int64_t>()[g] = scans[size_t(readable.scans[g])].label;
  const Scores scores = score(result.logits, labels);
  result.metrics = scores.metrics;
  result.confusion = scores.confusion;
  for (auto& f : write_scores(o.out, scores, result.failed, result.logits, labels, out)) result.files.push_back(f);
  if (out) {
    std::fprintf(out, "%s\nconfusion (rows: label, columns: predicted):", run::metrics_text(result.metrics).c_str());
    for (const auto& r : result.confusion) {
      std::fprintf(out, "\n ");
      for (int64_t v : r) std::fprintf(out, " %6lld", static_cast<long long>(v));
    }
    std::fprintf(out, "\n");
  }
  return result;
}

}  // namespace gridnn::predict
