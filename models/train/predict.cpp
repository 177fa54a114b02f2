// gridnn-predict's work (predict.h): scans in, probabilities, metrics and heatmaps out.
#include "models/train/predict.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include "core/file_io.h"
#include "core/error.h"
#include "core/png.h"
#include "models/data/nifti_dataset.h"
#include "models/data/nifti_volume.h"
#include "models/data/orientation.h"
#include "models/explain/gradcam.h"
#include "models/explain/montage.h"
#include "models/explain/roc_plot.h"
#include "models/layers/loss.h"
#include "models/train/grid_batch.h"
#include "models/train/pipelined_model.h"
#include "models/train/trainer.h"

namespace gridnn::train {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() > end.size() && s.compare(s.size() - end.size(), std::string::npos, end) == 0;
}

// A NIfTI file's name: single files (.nii), pairs by their header (.hdr), either gzipped;
// `image_too` also takes a pair's image file (.img), which a folder listing leaves out.
bool is_nifti_name(const std::string& name, bool image_too) {
  for (const char* ext : {".nii", ".nii.gz", ".hdr", ".hdr.gz", ".img", ".img.gz"})
    if (ends_with(name, ext) && (image_too || std::strncmp(ext, ".img", 4) != 0)) return true;
  return false;
}

// Every scan's file name for its explanation: its stem, or "<stem>-<n>" (n its 1-based place)
// when scans share a stem.
std::vector<std::string> explanation_names(const std::vector<ScanEntry>& scans) {
  std::map<std::string, int> uses;
  for (const auto& s : scans) ++uses[scan_stem(s.path)];
  std::vector<std::string> names;
  for (size_t i = 0; i < scans.size(); ++i) {
    const std::string stem = scan_stem(scans[i].path);
    names.push_back(uses[stem] > 1 ? stem + "-" + std::to_string(i + 1) : stem);
  }
  return names;
}

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}


// The softmax of each row of logits [rows, classes], in double.
std::vector<std::vector<double>> probabilities(const Tensor& logits) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const float* z = logits.data<float>();
  std::vector<std::vector<double>> p(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(classes)));
  for (int64_t r = 0; r < rows; ++r) {
    const double top = *std::max_element(z + r * classes, z + (r + 1) * classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += p[size_t(r)][size_t(c)] = std::exp(double(z[r * classes + c]) - top);
    for (double& v : p[size_t(r)]) v /= sum;
  }
  return p;
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

// Writes scan `scan`'s heatmap (NIfTI in its stored grid, PNG montage) from its coarse map,
// as <dir>/<name>_gradcam.*.
std::vector<std::string> write_explanation(const std::string& dir, const std::string& name, const data::Scan& scan,
                                           const Tensor& coarse, int64_t cls, bool canonical) {
  const std::array<int64_t, 3> input{scan.volume.size(0), scan.volume.size(1), scan.volume.size(2)};
  bool flat = false;
  const Tensor heat = explain::normalize_map(explain::upsample_map(coarse, input), &flat);
  if (flat)
    std::fprintf(stderr, "gridnn-predict: %s: the Grad-CAM map of class %lld is zero everywhere (no positive "
                 "evidence at this layer); its heatmap is all zeros\n", scan.stored.path.c_str(),
                 static_cast<long long>(cls));
  const std::string stem = (fs::path(dir) / name).string() + "_gradcam";
  data::write_nifti_like(stem + ".nii.gz", data::map_to_stored(heat, scan.to_stored, scan.stored.dims),
                         scan.stored.path);
  write_png(stem + ".png", explain::render_montage(scan.volume, heat, explain::peak_voxel(heat),
                                                   network_spacing(scan), 0, canonical));
  return {stem + ".nii.gz", stem + ".png"};
}

}  // namespace

std::string scan_stem(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* ext : {".gz", ".nii", ".hdr", ".img"})
    if (ends_with(name, ext)) name.resize(name.size() - std::strlen(ext));
  return name;
}

std::vector<ScanEntry> list_scans(const std::string& data, const std::string& split) {
  std::vector<ScanEntry> scans;
  std::error_code ec;
  if (fs::is_directory(data, ec)) {
    for (const auto& e : fs::directory_iterator(data))
      if (e.is_regular_file() && is_nifti_name(e.path().filename().string(), false))
        scans.push_back({e.path().string(), -1, 0});
    std::sort(scans.begin(), scans.end(), [](const ScanEntry& a, const ScanEntry& b) { return a.path < b.path; });
    GRIDNN_REQUIRE(!scans.empty(), "--data ", data, ": the folder has no NIfTI files (.nii, .nii.gz, .hdr)");
    return scans;
  }
  GRIDNN_REQUIRE(fs::exists(data, ec), "--data ", data, ": no such file or folder");
  if (is_nifti_name(data, true)) return {{data, -1, 0}};
  const data::Manifest manifest = data::read_manifest(data);
  std::optional<data::Split> only;
  if (split != "all") {
    only = data::parse_split(split);
    GRIDNN_REQUIRE(only && !split.empty(), "--split '", split, "': choose all, train, val or test");
  }
  std::map<std::string, int> splits;
  for (const auto& row : manifest.rows) {
    ++splits[row.split == data::Split::unassigned ? "(none)" : data::split_name(row.split)];
    if (!only || row.split == *only) scans.push_back({row.path, row.label, row.line});
  }
  std::string found;
  for (const auto& [name, count] : splits) found += (found.empty() ? "" : ", ") + name + " " + std::to_string(count);
  GRIDNN_REQUIRE(!scans.empty(), "--data ", data, ": no rows of split ", split, "; its rows by split: ", found,
                 " (--split all takes every row)");
  return scans;
}

PredictResult predict(const PredictOptions& o, parallel::ProcessGrid& grid, std::FILE* out) {
  GRIDNN_REQUIRE(grid.shape().stages == 1, "gridnn-predict runs on one pipeline stage: give --grid PrxPc, not ",
                 grid.shape().str());
  GRIDNN_REQUIRE(o.run.model == Model::resattnet3d, "gridnn-predict needs a ResAttNet3D model (volumes in)");
  GRIDNN_REQUIRE(o.run.batch >= 1, "--batch must be at least 1");
  GRIDNN_REQUIRE(o.explain_class < o.run.classes, "--explain-class ", o.explain_class, " is not a class of this model (",
                 o.run.classes, " classes: 0 to ", o.run.classes - 1, ")");
  const bool leader = grid.world_rank() == 0;
  PredictResult result;

  // The scans, as the dataset reads them (unlabelled rows get label 0 there).
  const std::vector<ScanEntry> scans = list_scans(o.data, o.split);
  data::Manifest manifest{o.data, {}};
  for (size_t i = 0; i < scans.size(); ++i)
    manifest.rows.push_back({scans[i].path, std::max<int64_t>(scans[i].label, 0), data::Split::unassigned, scans[i].line});
  const data::NiftiDataset dataset(std::move(manifest), nifti_dataset_options(o.run));
  result.scans = int64_t(scans.size());
  result.labelled = std::all_of(scans.begin(), scans.end(), [](const ScanEntry& s) { return s.label >= 0; });

  // The model: the checkpoint's or the weights' tensors (a mismatch lists them).
  TrainOptions run = o.run;
  run.init_from = o.weights;
  PipelinedModel model(run, grid);
  auto* net = dynamic_cast<nn::BlockNetwork*>(&model.model());
  GRIDNN_REQUIRE(net, "gridnn-predict: the model is not made of blocks");
  const bool explain = !o.explain_dir.empty();
  size_t layer = 0;
  if (explain) {
    layer = explain::layer_index(*net, o.explain_layer.empty() ? explain::default_layer(*net) : o.explain_layer);
    if (grid.row_rank() == 0) fs::create_directories(o.explain_dir);
  }
  const std::vector<std::string> names = explanation_names(scans);
  const bool canonical = o.run.data.orientation == data::Orientation::canonical;
  if (leader && fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path());
  if (out)
    std::fprintf(out, "predicting %zu scan%s on %s, grid %s%s\n", scans.size(), scans.size() == 1 ? "" : "s",
                 model.device().str().c_str(),
                 grid.shape().str().c_str(),
                 explain ? (", Grad-CAM of " + net->blocks()[layer].name + " into " + o.explain_dir).c_str() : "");

  // Which scans can be read: every rank tries its share, then all agree.
  const int world = grid.world().size();
  Tensor failed = Tensor::zeros(Shape{int64_t(scans.size())});
  for (size_t i = size_t(grid.world_rank()); i < scans.size(); i += size_t(world)) {
    try {
      dataset.load_scan(int64_t(i));
    } catch (const std::exception&) {
      failed.data<float>()[i] = 1.0f;
    }
  }
  grid.world().all_reduce(failed);
  std::vector<std::string> error(scans.size());
  std::vector<int64_t> good;
  for (size_t i = 0; i < scans.size(); ++i) {
    if (failed.data<float>()[i] == 0.0f) {
      good.push_back(int64_t(i));
      continue;
    }
    ++result.failed;
    if (!leader) continue;
    try {  // again, for the message
      dataset.load_scan(int64_t(i));
      error[i] = "could not be read on another rank";
    } catch (const std::exception& e) {
      error[i] = e.what();
    }
    std::fprintf(stderr, "gridnn-predict: skipped %s\n", error[i].c_str());
  }

  // Batches of the readable scans, each rank taking its shard's rows and planes as training
  // does (grid_batch.h); the last batch may be short.
  const std::array<int64_t, 3> input{o.run.input[0], o.run.input[1], o.run.input[2]};
  const parallel::Range depth = shard_planes(grid.shape(), grid.row_rank(), input[0]);
  const int64_t classes = o.run.classes;
  Tensor all_logits = Tensor::empty(Shape{int64_t(good.size()), classes});
  for (size_t start = 0; start < good.size(); start += size_t(o.run.batch)) {
    const int64_t rows = std::min<int64_t>(o.run.batch, int64_t(good.size() - start));
    const parallel::Range mine = shard_rows(grid.shape(), grid.col_rank(), rows);
    std::vector<data::Scan> local;
    data::Batch batch;
    batch.x = Tensor::empty(Shape{mine.size(), 1, depth.size(), input[1], input[2]});
    batch.y = Tensor::zeros(Shape{mine.size()}, DType::i64);
    for (int64_t k = 0; k < mine.size(); ++k) {
      local.push_back(dataset.load_scan(good[start + size_t(mine.begin + k)]));
      batch.x.narrow(k, 1).copy_from(local.back().volume.narrow(depth.begin, depth.size()).reshape(
          Shape{1, 1, depth.size(), input[1], input[2]}));
    }
    Tensor logits = Tensor::empty(Shape{0, classes});
    if (mine.size() > 0 && explain) {
      const explain::CoarseCam cam =
          explain::grad_cam(model.model(), *net, layer, batch.x.to(model.device()), o.explain_class, grid.row());
      logits = cam.logits;
      for (int64_t k = 0; grid.row_rank() == 0 && k < mine.size(); ++k) {
        const Tensor coarse = cam.maps.narrow(k, 1).reshape(Shape{cam.maps.size(1), cam.maps.size(2), cam.maps.size(3)});
        const size_t index = size_t(good[start + size_t(mine.begin + k)]);
        const data::Scan& scan = local[size_t(k)];
        for (auto& f : write_explanation(o.explain_dir, names[index], scan, coarse, cam.target[size_t(k)],
                                         canonical && scan.stored.source != data::AffineSource::none))
          result.files.push_back(std::move(f));
      }
    } else if (mine.size() > 0) {
      model.evaluate(batch, &logits);
      logits = logits.to(Device::cpu());
    }
    const Tensor whole = gather_rows(grid, logits);
    all_logits.narrow(int64_t(start), rows).copy_from(whole);
  }

  result.logits = all_logits;

  // Tables, on the first rank.
  if (!leader) return result;
  const auto prob = probabilities(all_logits);
  std::ostringstream csv;
  csv << "path";
  for (int64_t c = 0; c < classes; ++c) csv << ",prob_" << c;
  csv << ",predicted,label,error\n";
  char number[32];
  for (size_t i = 0, g = 0; i < scans.size(); ++i) {
    csv << csv_field(scans[i].path);
    if (!error[i].empty()) {
      for (int64_t c = 0; c < classes; ++c) csv << ",";
      csv << "," << "," << (scans[i].label >= 0 ? std::to_string(scans[i].label) : "") << "," << csv_field(error[i]) << "\n";
      continue;
    }
    const auto& p = prob[g++];
    for (double v : p) std::snprintf(number, sizeof number, "%.6g", v), csv << "," << number;
    csv << "," << (std::max_element(p.begin(), p.end()) - p.begin()) << ","
        << (scans[i].label >= 0 ? std::to_string(scans[i].label) : "") << ",\n";
  }
  write_file_atomically(o.out, csv.str());
  result.files.push_back(o.out);

  if (!result.labelled || good.empty()) return result;
  Tensor labels = Tensor::empty(Shape{int64_t(good.size())}, DType::i64);
  for (size_t g = 0; g < good.size(); ++g) labels.data<int64_t>()[g] = scans[size_t(good[g])].label;
  nn::SoftmaxCrossEntropy loss;
  loss.forward(all_logits, labels);
  MetricsAccumulator acc;
  acc.add(all_logits, labels, loss.loss_sum());
  result.metrics = acc.result();
  result.confusion.assign(size_t(classes), std::vector<int64_t>(size_t(classes), 0));
  std::vector<double> score;
  std::vector<int64_t> label;
  for (size_t g = 0; g < good.size(); ++g) {
    const auto& p = prob[g];
    ++result.confusion[size_t(labels.data<int64_t>()[g])][size_t(std::max_element(p.begin(), p.end()) - p.begin())];
    if (classes == 2) {
      const float* z = all_logits.data<float>() + 2 * g;
      score.push_back(positive_score(z[0], z[1]));  // the score the AUC ranks
      label.push_back(labels.data<int64_t>()[g]);
    }
  }
  const std::string stem = (fs::path(o.out).parent_path() / fs::path(o.out).stem()).string();
  nlohmann::ordered_json j = metrics_json(result.metrics);
  j["confusion"] = result.confusion;
  j["failed"] = result.failed;
  write_file_atomically(stem + "_metrics.json", j.dump(2) + "\n");
  result.files.push_back(stem + "_metrics.json");
  const bool both = std::count(label.begin(), label.end(), 1) > 0 && std::count(label.begin(), label.end(), 0) > 0;
  if (classes == 2 && !both && out)
    std::fprintf(out, "no ROC curve: the readable labelled scans are all of class %lld\n",
                 static_cast<long long>(label.empty() ? 0 : label[0]));
  if (classes == 2 && both) {
    const auto curve = explain::roc_curve(score, label);
    std::ostringstream roc;
    roc << std::setprecision(17) << "threshold,fpr,tpr\n";
    for (const auto& pt : curve) roc << pt.threshold << "," << pt.fpr << "," << pt.tpr << "\n";
    write_file_atomically(stem + "_roc.csv", roc.str());
    write_png(stem + "_roc.png", explain::render_roc(curve, result.metrics.auc));
    result.files.push_back(stem + "_roc.csv");
    result.files.push_back(stem + "_roc.png");
  }
  if (out) {
    std::fprintf(out, "%s\nconfusion (rows: label, columns: predicted):", metrics_text(result.metrics).c_str());
    for (const auto& r : result.confusion) {
      std::fprintf(out, "\n ");
      for (int64_t v : r) std::fprintf(out, " %6lld", static_cast<long long>(v));
    }
    std::fprintf(out, "\n");
  }
  return result;
}

}  // namespace gridnn::train
