// Grad-CAM (models/explain/gradcam.h) checked three ways: against PyTorch on a fixture
// (test/parity/make_gradcam_fixtures.py), on a hand-built network whose evidence lies in one
// known cube, and on the edge cases (no positive evidence, unknown layers).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/explain/gradcam.h"
#include "models/layers/activation.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"
#include "models/nets/resattnet3d.h"
#include "models/train/whole_state.h"
#include "parallel/process_grid.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using test::max_relative_error;

struct Fixture {
  std::map<std::string, Tensor> t;
  const Tensor& operator[](const std::string& name) const { return t.at(name); }
};
const Fixture& fixture() {
  static const Fixture f{load_safetensors(std::string(GRIDNN_TEST_DATA_DIR) + "/gradcam.safetensors").tensors};
  return f;
}

// The fixture's network (depth 18, width 4, 3 classes, attention after layer3 and layer4)
// with its weights.
std::unique_ptr<nn::ResAttNet3D> fixture_model() {
  nn::ResAttNetConfig config;
  config.width = 4;
  config.classes = 3;
  config.input_size = {48, 56, 40};
  auto model = std::make_unique<nn::ResAttNet3D>(config);
  model->name_modules();
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : fixture().t)
    if (name.rfind("init.", 0) == 0) weights[name.substr(5)] = t;
  train::load_model_tensors(*model, weights, "gradcam.safetensors");
  return model;
}

TEST(GradCam, MatchesPyTorchOnEveryLayer) {
  auto model = fixture_model();
  auto grid = parallel::ProcessGrid::single();
  for (const std::string layer : {"att4", "layer3.1", "stem"}) {
    SCOPED_TRACE(layer);
    const std::vector<int64_t> expected_class = fixture()[layer + ".class"].to_vector<int64_t>();
    // att4 explains the predicted class; the others a given one.
    const int64_t target = layer == "att4" ? -1 : expected_class[0];
    const explain::CoarseCam cam =
        explain::grad_cam(*model, *model, explain::layer_index(*model, layer), fixture()["x"], target, grid->row());
    EXPECT_EQ(cam.target, expected_class);
    EXPECT_LE(max_relative_error(cam.logits, fixture()["expect.logits"]), 1e-5);
    EXPECT_LE(max_relative_error(cam.weights, fixture()[layer + ".weights"]), 1e-4);
    EXPECT_LE(max_relative_error(cam.maps, fixture()[layer + ".coarse"]), 1e-4);
    if (layer == "att4") {
      const Tensor& expected = fixture()["att4.upsampled"];
      const Tensor map0 = cam.maps.narrow(0, 1).reshape(Shape{cam.maps.size(1), cam.maps.size(2), cam.maps.size(3)});
      EXPECT_LE(max_relative_error(explain::upsample_map(map0, {48, 56, 40}), expected), 1e-4);
    }
  }
  // Explaining leaves no parameter gradient behind.
  for (auto& [name, p] : model->named_parameters())
    for (float g : p->grad.to_vector<float>()) ASSERT_EQ(g, 0.0f) << name;
}

TEST(GradCam, UpsamplingIsPyTorchsTrilinearWithoutCornerAlignment) {
  for (int i = 0; i < 3; ++i) {
    const Tensor& in = fixture()["interp." + std::to_string(i) + ".in"];
    const Tensor& out = fixture()["interp." + std::to_string(i) + ".out"];
    SCOPED_TRACE(in.str() + " -> " + out.str());
    EXPECT_TRUE(
        test::tensors_close(explain::upsample_map(in, {out.size(0), out.size(1), out.size(2)}), out, {1e-6, 1e-6}));
  }
}

TEST(GradCam, LayersAreTheVolumeBlocksAndTheDefaultIsTheLastAttention) {
  auto model = fixture_model();
  const auto names = explain::explainable_layers(*model);
  ASSERT_EQ(names.size(), 11u);  // stem, 8 residual blocks, att3, att4 (not the head)
  EXPECT_EQ(names.front(), "stem");
  EXPECT_EQ(names.back(), "att4");
  EXPECT_EQ(explain::default_layer(*model), "att4");
  try {
    explain::layer_index(*model, "head");
    FAIL() << "the head has no volume output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose one of: stem, layer1.0"), std::string::npos) << e.what();
  }
  nn::ResAttNetConfig no_attention;
  no_attention.width = 4;
  no_attention.attention3 = no_attention.attention4 = false;
  nn::ResAttNet3D plain(no_attention);
  EXPECT_EQ(explain::default_layer(plain), "layer4.1");
}

// conv (2^3, stride 2, weights 1/8) - ReLU | global average pool - linear [+1, -1]: class 0's
// evidence is the mean of the input's 2^3 cells, class 1's its negative.
class CubeNet : public nn::Module, public nn::BlockNetwork {
 public:
  CubeNet() : Module("CubeNet") {
    conv_ = &register_module("conv", std::make_unique<nn::Conv3d>(1, 1, 2, 2, 0, false));
    pool_ = &register_module("pool", std::make_unique<nn::GlobalAvgPool3d>());
    fc_ = &register_module("fc", std::make_unique<nn::Linear>(1, 2));
    for (auto& [name, p] : named_parameters()) {
      float* v = p->value.data<float>();
      if (name == "conv.weight") std::fill(v, v + p->value.numel(), 0.125f);
      if (name == "fc.weight") v[0] = 1.0f, v[1] = -1.0f;
      if (name == "fc.bias") v[0] = v[1] = 0.0f;
    }
    blocks_ = {{"features", {"conv."}, {4, 4, 4}}, {"head", {"fc."}, {0, 0, 0}}};
  }
  Tensor forward(const Tensor& x) override { return forward_blocks(0, 2, x); }
  const std::vector<nn::BlockInfo>& blocks() const override { return blocks_; }
  Tensor forward_block(size_t i, const Tensor& x) override {
    return i == 0 ? relu_.forward(conv_->forward(x)) : fc_->forward(pool_->forward(x));
  }
  Tensor backward_block(size_t i, const Tensor& dy) override {
    return i == 0 ? conv_->backward(relu_.backward(dy)) : pool_->backward(fc_->backward(dy));
  }

 private:
  Tensor do_backward(const Tensor& dy) override { return backward_blocks(0, 2, dy); }

  std::vector<nn::BlockInfo> blocks_;
  Module* conv_;
  Module* pool_;
  Module* fc_;
  nn::ReLU relu_;
};

TEST(GradCam, PeaksInsideTheRegionThatHoldsTheEvidence) {
  CubeNet net;
  auto grid = parallel::ProcessGrid::single();
  // A cube of ones at d in [2, 4), h in [4, 6), w in [2, 4) of an 8^3 volume of zeros: the
  // coarse cell (1, 2, 1).
  Tensor x = Tensor::zeros(Shape{1, 1, 8, 8, 8});
  auto inside = [](int64_t d, int64_t h, int64_t w, int64_t margin) {
    return d >= 2 - margin && d < 4 + margin && h >= 4 - margin && h < 6 + margin && w >= 2 - margin && w < 4 + margin;
  };
  for (int64_t d = 0; d < 8; ++d)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t w = 0; w < 8; ++w)
        if (inside(d, h, w, 0)) x.data<float>()[(d * 8 + h) * 8 + w] = 1.0f;

  const explain::CoarseCam cam0 = explain::grad_cam(net, net, 0, x, 0, grid->row());
  ASSERT_EQ(cam0.maps.shape(), (Shape{1, 4, 4, 4}));
  EXPECT_FLOAT_EQ(cam0.weights.data<float>()[0], 1.0f / 64.0f);  // fc's +1 over the 64 voxels
  for (int64_t v = 0; v < 64; ++v)
    EXPECT_FLOAT_EQ(cam0.maps.data<float>()[v], v == (1 * 4 + 2) * 4 + 1 ? 1.0f / 64.0f : 0.0f) << v;
  bool flat = true;
  const Tensor heat =
      explain::normalize_map(explain::upsample_map(cam0.maps.reshape(Shape{4, 4, 4}), {8, 8, 8}), &flat);
  EXPECT_FALSE(flat);
  double in_cube = 0, total = 0, outside_dilated = 0, peak = -1;
  int64_t peak_at = -1;
  for (int64_t d = 0; d < 8; ++d)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t w = 0; w < 8; ++w) {
        const double v = heat.data<float>()[(d * 8 + h) * 8 + w];
        total += v;
        if (inside(d, h, w, 0)) in_cube += v;
        if (!inside(d, h, w, 1)) outside_dilated += v;
        if (v > peak) peak = v, peak_at = (d * 8 + h) * 8 + w;
      }
  EXPECT_TRUE(inside(peak_at / 64, peak_at / 8 % 8, peak_at % 8, 0)) << "peak at flat index " << peak_at;
  EXPECT_DOUBLE_EQ(peak, 1.0);
  EXPECT_GT(in_cube / total, 0.25);  // 8 of 512 voxels hold over a quarter of the heat
  EXPECT_EQ(outside_dilated, 0.0);

  // Class 1 has only negative evidence: a map of zeros, flagged flat, and no NaN.
  const explain::CoarseCam cam1 = explain::grad_cam(net, net, 0, x, 1, grid->row());
  for (float v : cam1.maps.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  const Tensor heat1 = explain::normalize_map(cam1.maps.reshape(Shape{4, 4, 4}), &flat);
  EXPECT_TRUE(flat);
  for (float v : heat1.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  EXPECT_THROW(explain::grad_cam(net, net, 0, x, 2, grid->row()), Error);  // no class 2
}

}  // namespace
}  // namespace gridnn
