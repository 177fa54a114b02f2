// Class activation maps (models/explain/gradcam.h) and their fusion and test-time transforms
// (models/explain/explanation.h) checked against PyTorch on a fixture
// (test/parity/make_gradcam_fixtures.py), on a hand-built network whose evidence lies in one
// known cube, against plain-loop references, and on the edge cases (no positive evidence,
// unknown layers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/explain/explanation.h"
#include "models/explain/gradcam.h"
#include "models/layers/activation.h"
#include "models/layers/conv3d.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"
#include "models/nets/resattnet3d.h"
#include "models/run/whole_state.h"
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
  run::load_model_tensors(*model, weights, "gradcam.safetensors");
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

TEST(GradCam, GradCamPlusPlusAndHiResCamMatchPyTorch) {
  auto model = fixture_model();
  auto grid = parallel::ProcessGrid::single();
  for (const std::string layer : {"att4", "layer3.1", "stem"})
    for (const explain::CamMethod method : {explain::CamMethod::gradcam_pp, explain::CamMethod::hirescam}) {
      const std::string name = layer + "." + enum_name(method);
      SCOPED_TRACE(name);
      const int64_t target = fixture()[layer + ".class"].to_vector<int64_t>()[0];
      const explain::CoarseCam cam = explain::grad_cam(*model, *model, explain::layer_index(*model, layer),
                                                       fixture()["x"], target, grid->row(), method);
      EXPECT_LE(max_relative_error(cam.maps, fixture()[name + ".coarse"]), 1e-4);
      if (method == explain::CamMethod::gradcam_pp) {
        EXPECT_LE(max_relative_error(cam.weights, fixture()[name + ".weights"]), 1e-4);
      } else {
        EXPECT_FALSE(cam.weights.defined());
      }
    }
}

// Several layers share one forward and one backward, and each map is the one a pass of its own gives.
TEST(GradCam, SeveralLayersInOnePassGiveEachLayersOwnMap) {
  auto model = fixture_model();
  auto grid = parallel::ProcessGrid::single();
  const std::vector<size_t> layers = explain::parse_layers(*model, "stem,layer3.1,att4");
  for (const explain::CamMethod method : {explain::CamMethod::gradcam, explain::CamMethod::hirescam}) {
    const std::vector<explain::CoarseCam> cams =
        explain::class_activation_maps(*model, *model, layers, fixture()["x"], {2, 0}, grid->row(), method);
    ASSERT_EQ(cams.size(), 3u);
    for (size_t i = 0; i < layers.size(); ++i) {
      SCOPED_TRACE(model->blocks()[layers[i]].name);
      EXPECT_EQ(cams[i].target, (std::vector<int64_t>{2, 0}));
      // Sample by sample, with a one-sample class each.
      for (int64_t b = 0; b < 2; ++b) {
        const explain::CoarseCam one = explain::grad_cam(*model, *model, layers[i], fixture()["x"].narrow(b, 1),
                                                         cams[i].target[size_t(b)], grid->row(), method);
        EXPECT_LE(max_relative_error(one.maps, cams[i].maps.narrow(b, 1)), 1e-5);
      }
    }
  }
}

TEST(GradCam, LayerListsGroupsAndOnwards) {
  auto model = fixture_model();
  auto names = [&](const std::string& spec) {
    std::string out;
    for (size_t i : explain::parse_layers(*model, spec)) out += (out.empty() ? "" : " ") + model->blocks()[i].name;
    return out;
  };
  EXPECT_EQ(names(""), "att4");
  EXPECT_EQ(names("att4,att3"), "att3 att4");
  EXPECT_EQ(names("layer3"), "layer3.0 layer3.1");
  EXPECT_EQ(names("layer3+"), "layer3.0 layer3.1 att3 layer4.0 layer4.1 att4");
  EXPECT_EQ(names("att3+,stem,att4"), "stem att3 layer4.0 layer4.1 att4");
  for (const std::string bad : {"layer9", "att4,", "head+", "layer"}) {
    SCOPED_TRACE(bad);
    try {
      explain::parse_layers(*model, bad);
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("choose one of: stem, layer1.0"), std::string::npos) << e.what();
    }
  }
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
  Tensor backward_block(size_t i, Tensor dy) override {
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

  // The cell's value per method: gradcam and hirescam w = g = fc's +1 over the 64 voxels;
  // gradcam++ (S = 1: one cell of ones) w = 64 a g = a = g^2 / (2 g^2 + g^3 + 1e-7).
  const double g = 1.0 / 64.0;
  const std::pair<explain::CamMethod, float> methods[] = {
      {explain::CamMethod::gradcam, float(g)},
      {explain::CamMethod::gradcam_pp, float(g * g / (2 * g * g + g * g * g + 1e-7))},
      {explain::CamMethod::hirescam, float(g)}};
  for (const auto& [method, cell] : methods) {
    SCOPED_TRACE(enum_name(method));
    const explain::CoarseCam cam0 = explain::grad_cam(net, net, 0, x, 0, grid->row(), method);
    ASSERT_EQ(cam0.maps.shape(), (Shape{1, 4, 4, 4}));
    if (method != explain::CamMethod::hirescam) {
      EXPECT_FLOAT_EQ(cam0.weights.data<float>()[0], cell);
    }
    for (int64_t v = 0; v < 64; ++v)
      EXPECT_NEAR(cam0.maps.data<float>()[v], v == (1 * 4 + 2) * 4 + 1 ? cell : 0.0f, 1e-7f) << v;
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
    const explain::CoarseCam cam1 = explain::grad_cam(net, net, 0, x, 1, grid->row(), method);
    for (float v : cam1.maps.to_vector<float>()) ASSERT_EQ(v, 0.0f);
    const Tensor heat1 = explain::normalize_map(cam1.maps.reshape(Shape{4, 4, 4}), &flat);
    EXPECT_TRUE(flat);
    for (float v : heat1.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  }
  EXPECT_THROW(explain::grad_cam(net, net, 0, x, 2, grid->row()), Error);  // no class 2
}

// Plain loops, written apart from explanation.cpp: the volume with its content moved by
// `shift` voxels along `axis` (border planes repeated), then mirrored along w when `flip`.
Tensor moved(const Tensor& v, int axis, int64_t shift, bool flip) {
  const int64_t D = v.size(0), H = v.size(1), W = v.size(2);
  Tensor out = Tensor::empty(v.shape());
  for (int64_t d = 0; d < D; ++d)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        int64_t sd = d, sh = h, sw = flip ? W - 1 - w : w;
        if (axis == 0) sd = std::clamp<int64_t>(sd - shift, 0, D - 1);
        if (axis == 1) sh = std::clamp<int64_t>(sh - shift, 0, H - 1);
        if (axis == 2) sw = std::clamp<int64_t>(sw - shift, 0, W - 1);
        out.data<float>()[(d * H + h) * W + w] = v.data<float>()[(sd * H + sh) * W + sw];
      }
  return out;
}

TEST(Explanation, TheTransformsAreTheMirrorAndSmallShifts) {
  const std::array<int64_t, 3> size{48, 56, 40};
  // {flip, axis, shift} for t = 0 ..: the volume, its mirror, then +-2 planes of d (48 / 24),
  // +-2 rows of h, +-1 column of w, each with its mirror; from j = 7 on twice as far.
  const std::vector<std::tuple<bool, int, int64_t>> expected{{false, 0, 0},  {true, 0, 0},  {false, 0, 2}, {true, 0, 2},
                                                             {false, 0, -2}, {true, 0, -2}, {false, 1, 2}, {true, 1, 2},
                                                             {false, 1, -2}, {true, 1, -2}, {false, 2, 1}, {true, 2, 1},
                                                             {false, 2, -1}, {true, 2, -1}, {false, 0, 4}};
  for (size_t t = 0; t < expected.size(); ++t) {
    const explain::TtaTransform x = explain::tta_transform(int64_t(t), size);
    EXPECT_EQ(std::make_tuple(x.flip, x.shift == 0 ? 0 : x.axis, x.shift), expected[t]) << "t = " << t;
  }
}

TEST(Explanation, AMapOfTheTransformedVolumeComesBackToItsVoxels) {
  Tensor v = Tensor::empty(Shape{5, 6, 7});
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = float(i + 1);
  for (int64_t t = 0; t < 16; ++t) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const explain::TtaTransform x = explain::tta_transform(t, {5, 6, 7});
    const Tensor seen = explain::transform_volume(v, x);
    EXPECT_TRUE(test::tensors_equal(seen, moved(v, x.axis, x.shift, x.flip)));
    // A "map" equal to what the network saw maps back onto the volume wherever it is counted:
    // everywhere but the |shift| planes whose content left the volume.
    Tensor sum = Tensor::zeros(v.shape()), count = Tensor::zeros(v.shape());
    explain::add_mapped_back(seen, x, sum, count);
    int64_t counted = 0;
    for (int64_t i = 0; i < v.numel(); ++i) {
      const float c = count.data<float>()[i];
      ASSERT_TRUE(c == 0.0f || c == 1.0f);
      counted += int64_t(c);
      ASSERT_EQ(sum.data<float>()[i], c * v.data<float>()[i]) << i;
    }
    const int64_t n = v.size(x.axis);
    EXPECT_EQ(counted, v.numel() / n * (n - std::abs(x.shift)));
  }
}

// The heat of explain_batch with N transforms and several layers against its definition:
// each transformed input (plain loops) explained for the untransformed input's class, its
// layers' maps upsampled, normalized and averaged, mapped back, averaged over what covers
// each voxel and normalized.
TEST(Explanation, TheHeatIsTheMeanOverTransformsOfTheFusedLayers) {
  auto model = fixture_model();
  auto grid = parallel::ProcessGrid::single();
  const Tensor& x = fixture()["x"];
  const Shape one{48, 56, 40};
  const Tensor volumes = x.reshape(Shape{2, 48, 56, 40});
  const std::vector<size_t> layers = explain::parse_layers(*model, "layer3.1,att4");
  for (const explain::CamMethod method : {explain::CamMethod::gradcam, explain::CamMethod::hirescam}) {
    SCOPED_TRACE(enum_name(method));
    const explain::ExplainOptions options{method, layers, 5, -1};
    const explain::BatchExplanation e =
        explain::explain_batch(*model, *model, volumes, {0, 48}, Device::cpu(), options, grid->row());
    ASSERT_EQ(e.heat.shape(), (Shape{2, 48, 56, 40}));
    for (int64_t b = 0; b < 2; ++b) {
      const Tensor volume = volumes.narrow(b, 1).reshape(one);
      std::vector<double> sum(size_t(one.numel()), 0.0), count(size_t(one.numel()), 0.0);
      for (int64_t t = 0; t < 5; ++t) {
        const explain::TtaTransform tr = explain::tta_transform(t, {48, 56, 40});
        const Tensor input = moved(volume, tr.axis, tr.shift, tr.flip).reshape(Shape{1, 1, 48, 56, 40});
        std::vector<double> fused(size_t(one.numel()), 0.0);
        for (size_t layer : layers) {
          const explain::CoarseCam cam =
              explain::grad_cam(*model, *model, layer, input, e.target[size_t(b)], grid->row(), method);
          const Tensor coarse = cam.maps.reshape(Shape{cam.maps.size(1), cam.maps.size(2), cam.maps.size(3)});
          const Tensor heat = explain::normalize_map(explain::upsample_map(coarse, {48, 56, 40}));
          for (int64_t i = 0; i < one.numel(); ++i) fused[size_t(i)] += heat.data<float>()[i] / 2.0;
        }
        // Back: input voxel (d, h, w) was seen at (d, h, w) + shift, then mirrored.
        for (int64_t d = 0; d < 48; ++d)
          for (int64_t h = 0; h < 56; ++h)
            for (int64_t w = 0; w < 40; ++w) {
              std::array<int64_t, 3> at{d, h, w};
              at[size_t(tr.axis)] += tr.shift;
              if (at[size_t(tr.axis)] < 0 || at[size_t(tr.axis)] >= one[tr.axis]) continue;
              if (tr.flip) at[2] = 39 - at[2];
              sum[size_t((d * 56 + h) * 40 + w)] += fused[size_t((at[0] * 56 + at[1]) * 40 + at[2])];
              count[size_t((d * 56 + h) * 40 + w)] += 1;
            }
      }
      Tensor mean = Tensor::empty(one);
      for (int64_t i = 0; i < one.numel(); ++i) mean.data<float>()[i] = float(sum[size_t(i)] / count[size_t(i)]);
      EXPECT_LE(max_relative_error(e.heat.narrow(b, 1).reshape(one), explain::normalize_map(mean)), 1e-4)
          << "sample " << b;
    }
    // The logits and classes are the untransformed input's.
    const explain::CoarseCam plain = explain::grad_cam(*model, *model, layers[0], x, -1, grid->row(), method);
    EXPECT_EQ(e.target, plain.target);
    EXPECT_TRUE(test::tensors_equal(e.logits, plain.logits));
  }
}

TEST(Explanation, ZeroTransformsAreRefused) {
  auto model = fixture_model();
  auto grid = parallel::ProcessGrid::single();
  const explain::ExplainOptions options{explain::CamMethod::gradcam, {explain::layer_index(*model, "att4")}, 0, -1};
  try {
    explain::explain_batch(*model, *model, fixture()["x"].reshape(Shape{2, 48, 56, 40}), {0, 48}, Device::cpu(),
                           options, grid->row());
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--explain-tta must be at least 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gridnn
