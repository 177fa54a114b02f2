// Class activation maps (every method) on every PrxPc grid of the job (label mpi): the target block's output
// depth-split over the row (att4's 2 planes on Pr = 2; the stem's 12 on any Pr) or replicated (att4 on Pr = 3), the
// batch over the columns; every rank returns its samples' whole maps, equal to the single process's within 1e-5, and
// the same bits on every rank of a row.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "core/safetensors.h"
#include "models/dist/factory.h"
#include "models/explain/gradcam.h"
#include "models/nets/resattnet3d.h"
#include "models/run/whole_state.h"
#include "parallel/process_grid.h"
#include "test/support/grids.h"
#include "test/support/mpi_main.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using parallel::GridShape;
using parallel::ProcessGrid;
using parallel::Range;

std::map<std::string, Tensor> fixture() {
  return load_safetensors(std::string(GRIDNN_TEST_DATA_DIR) + "/gradcam.safetensors").tensors;
}

std::unique_ptr<nn::ResAttNet3D> model_on(const nn::LayerFactory& layers, const std::map<std::string, Tensor>& f) {
  nn::ResAttNetConfig config;
  config.width = 4;
  config.classes = 3;
  config.input_size = {48, 56, 40};
  auto model = std::make_unique<nn::ResAttNet3D>(config, layers);
  model->name_modules();
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : f)
    if (name.rfind("init.", 0) == 0) weights[name.substr(5)] = t;
  run::load_model_tensors(*model, weights, "gradcam.safetensors");
  return model;
}

// Samples `rows` of x [B, C, D, H, W] (contiguous), depth planes `planes`.
Tensor slab(const Tensor& x, Range rows, Range planes) {
  const int64_t c = x.size(1), d = x.size(2), hw = x.size(3) * x.size(4);
  Tensor out = Tensor::empty(Shape{rows.size(), c, planes.size(), x.size(3), x.size(4)});
  for (int64_t s = 0; s < rows.size(); ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      std::memcpy(out.data<float>() + (s * c + ch) * planes.size() * hw,
                  x.data<float>() + (((rows.begin + s) * c + ch) * d + planes.begin) * hw,
                  size_t(planes.size() * hw) * sizeof(float));
  return out;
}

TEST(GradCamGrid, EveryGridGivesTheSingleProcessMaps) {
  const auto f = fixture();
  const Tensor& x = f.at("x");
  auto single = ProcessGrid::single();
  auto reference = model_on(nn::LayerFactory(), f);
  for (const GridShape& shape : test::job_grids(test::world_size())) {
    auto grid = ProcessGrid::create(shape);
    SCOPED_TRACE("grid " + shape.str() + ", rank " + std::to_string(test::world_rank()));
    nn::GridLayerFactory layers(*grid);
    auto model = model_on(layers, f);
    const Range rows = parallel::balanced_range(x.size(0), shape.cols, grid->col_rank());
    const Range planes = parallel::balanced_range(x.size(2), shape.rows, grid->row_rank());
    if (rows.size() == 0) continue;  // 2 samples over 3 batch shards: this column has none
    for (const std::string layer : {"att4", "stem"})
      for (const explain::CamMethod method :
           {explain::CamMethod::gradcam, explain::CamMethod::gradcam_pp, explain::CamMethod::hirescam}) {
        SCOPED_TRACE(layer + " " + enum_name(method));
        const explain::CoarseCam ref =
            explain::grad_cam(*reference, *reference, explain::layer_index(*reference, layer),
                              slab(x, rows, {0, x.size(2)}), -1, single->row(), method);
        const explain::CoarseCam cam = explain::grad_cam(*model, *model, explain::layer_index(*model, layer),
                                                         slab(x, rows, planes), -1, grid->row(), method);
        EXPECT_EQ(cam.target, ref.target);
        EXPECT_LE(test::max_relative_error(cam.logits, ref.logits), 1e-5);
        if (method != explain::CamMethod::hirescam) {
          EXPECT_LE(test::max_relative_error(cam.weights, ref.weights), 1e-5);
        }
        ASSERT_EQ(cam.maps.shape(), ref.maps.shape());
        EXPECT_LE(test::max_relative_error(cam.maps, ref.maps), 1e-5);
        // The same bits on every rank of the row: the first rank's maps broadcast and compared.
        Tensor first = cam.maps.clone();
        grid->row().broadcast(first, 0);
        EXPECT_TRUE(test::tensors_equal(cam.maps, first));
      }
  }
}

}  // namespace
}  // namespace gridnn
