// gridnn-predict on a grid (label mpi, 2 ranks): 2x1 (each volume's depth split) and 1x2 (the
// scans split) give the single process's logits and heatmaps within 1e-5, for every
// explanation method, fused layers and test-time transforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "models/data/nifti_volume.h"
#include "models/predict/predict.h"
#include "models/run/whole_state.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/mpi_main.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;
using parallel::GridShape;
using parallel::ProcessGrid;

TEST(PredictGrid, EveryGridGivesTheSingleProcessResults) {
  ASSERT_EQ(test::world_size(), 2);
  auto pair = ProcessGrid::create(GridShape{1, 1, 2});
  const test::TempDir shared = test::shared_temp_dir("predict_grid");
  const fs::path& dir = shared.path();

  run::RunOptions o;
  o.resattnet.width = 2;
  o.input = {12, 12, 12};
  o.data.fit = data::Fit::resample;
  o.batch = 3;
  if (test::world_rank() == 0) {
    std::ofstream csv(dir / "scans.csv");
    csv << "path,label\n";
    for (int i = 0; i < 5; ++i) {
      test::NiftiSpec spec;
      spec.dims = {11, 13, 14};
      std::vector<double> v(11 * 13 * 14);
      for (size_t k = 0; k < v.size(); ++k) v[k] = double((k * (i + 5)) % 41) * 0.1;
      test::write_nifti1((dir / ("s" + std::to_string(i) + ".nii")).string(), spec, v);
      csv << "s" << i << ".nii," << i % 2 << "\n";
    }
    auto model = run::build_model(o);
    NamedTensors weights;
    for (auto& [name, p] : model->named_parameters()) weights.emplace_back(name, p->value);
    for (auto& [name, b] : model->named_buffers()) weights.emplace_back(name, *b);
    save_safetensors((dir / "w.safetensors").string(), weights);
  }
  Tensor done = Tensor::zeros(Shape{1});
  pair->world().all_reduce(done);  // the files are written

  predict::PredictOptions p;
  p.run = o;
  p.weights = (dir / "w.safetensors").string();
  p.data = (dir / "scans.csv").string();
  struct Explained {
    explain::CamMethod method;
    const char* layers;
    int64_t tta, target;
  };
  const Explained cases[] = {{explain::CamMethod::gradcam, "stem,layer1", 1, 0},
                             {explain::CamMethod::gradcam_pp, "layer1.1+", 3, -1},
                             {explain::CamMethod::hirescam, "layer2.1,att4", 4, -1}};
  for (const Explained& c : cases) {
    const std::string tag = std::string(enum_name(c.method)) + "_" + std::to_string(c.tta);
    SCOPED_TRACE(tag + " of '" + c.layers + "'");
    p.explain_method = c.method;
    p.explain_layer = c.layers;
    p.explain_tta = c.tta;
    p.explain_class = c.target;
    auto run = [&](ProcessGrid& grid, const std::string& name) {
      p.out = (dir / (name + ".csv")).string();
      p.explain_dir = (dir / name).string();
      return predict::predict(p, grid, nullptr);
    };
    auto single = ProcessGrid::single();
    const std::string reference = tag + "_single" + std::to_string(test::world_rank());
    const predict::PredictResult ref = run(*single, reference);
    ASSERT_EQ(ref.logits.size(0), 5);
    for (const GridShape& shape : {GridShape{1, 2, 1}, GridShape{1, 1, 2}}) {
      SCOPED_TRACE("grid " + shape.str() + ", rank " + std::to_string(test::world_rank()));
      auto grid = ProcessGrid::create(shape);
      const predict::PredictResult r = run(*grid, tag + "_grid" + shape.str());
      EXPECT_EQ(r.failed, 0);
      EXPECT_LE(test::max_relative_error(r.logits, ref.logits), 1e-5);
      pair->world().all_reduce(done);  // every heatmap is written
      for (int i = 0; i < 5; ++i) {
        const std::string file = "s" + std::to_string(i) + "_gradcam.nii.gz";
        const Tensor expected = data::read_nifti_volume((dir / reference / file).string());
        const Tensor got = data::read_nifti_volume((dir / (tag + "_grid" + shape.str()) / file).string());
        EXPECT_TRUE(test::tensors_close(got, expected, {1e-5, 1e-5})) << file;
        const std::vector<float> heat = expected.to_vector<float>();
        EXPECT_GT(*std::max_element(heat.begin(), heat.end()), 0.5f) << file << ": a heatmap with no evidence";
      }
    }
  }
  pair->world().all_reduce(done);  // before rank 0 removes the folder
}

}  // namespace
}  // namespace gridnn
