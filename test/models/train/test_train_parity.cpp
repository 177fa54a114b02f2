// gridnn-train --dump-step against one training step of the same ResAttNet3D in PyTorch
// (test/parity/make_train_fixtures.py; float64 reference, fp32 CPU here): logits, loss,
// every parameter gradient, and every parameter and buffer after an SGD (momentum,
// Nesterov, weight decay) and an AdamW step, each within relative error 1e-4:
//   max |gridnn - torch| / max |torch|  per tensor,
// with two refinements that keep fp32 rounding from posing as an error:
//   - a gradient is measured against its own size or 1% of the model's largest gradient,
//     whichever is larger: small gradients come out of cancelling sums (the attention
//     gamma's sum(dy * O) cancels ~1000-fold here) and carry the rounding of the larger
//     terms; a real mistake shows at the scale of the model's gradients;
//   - a gradient that is zero in exact arithmetic (the key bias: softmax over the keys
//     ignores a shift shared by all keys) is rounding noise in fp32, and Adam's first step
//     moves such a parameter by up to lr in the noise's direction: there the updated
//     values must agree within lr.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/safetensors.h"
#include "test/support/temp_dir.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxRelativeError = 1e-4;
constexpr double kGradientFloor = 1e-2;  // of the largest gradient
constexpr double kZeroGradient = 1e-6;   // of the largest gradient

struct Fixture {
  std::map<std::string, Tensor> all;
  NamedTensors with_prefix(const std::string& prefix) const {
    NamedTensors out;
    for (const auto& [name, t] : all)
      if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
    return out;
  }
};

const Fixture& fixture() {
  static const Fixture f{load_safetensors(std::string(GRIDNN_TEST_DATA_DIR) + "/resattnet_step.safetensors").tensors};
  return f;
}

// Runs gridnn-train --dump-step with the model of the fixture and `optimizer_flags`;
// returns what it wrote.
std::map<std::string, Tensor> dump_step(const std::string& tag, const std::string& optimizer_flags) {
  const test::TempDir temp("parity_" + tag);
  const fs::path dir = temp.path();
  const std::string weights = (dir / "init.safetensors").string();
  const std::string batch = (dir / "batch.safetensors").string();
  const std::string out = (dir / "out.safetensors").string();
  save_safetensors(weights, fixture().with_prefix("init."));
  save_safetensors(batch, {{"x", fixture().all.at("x")}, {"y", fixture().all.at("y")}});
  const std::string cmd = std::string(GRIDNN_TRAIN_EXE) +
                          " --model resattnet3d --depth 18 --width 2 --attention both --in-channels 1"
                          " --classes 3 --input 32x40x36 " +
                          optimizer_flags + " --init-from " + weights + " --batch-file " + batch + " --dump-step " +
                          out + " > " + (dir / "log.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
  return rc == 0 ? load_safetensors(out).tensors : std::map<std::string, Tensor>{};
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : test::to_doubles(t)) m = std::max(m, std::fabs(v));
  return m;
}

// max |got - expected| / max(max |expected|, floor), or the absolute error when absolute.
void expect_matches(const std::map<std::string, Tensor>& got, const std::string& name, const Tensor& expected,
                    double floor = 0, double absolute_tolerance = -1) {
  auto it = got.find(name);
  ASSERT_NE(it, got.end()) << "gridnn-train did not write '" << name << "'";
  ASSERT_EQ(it->second.shape(), expected.shape()) << name;
  if (expected.dtype() == DType::i64) {
    EXPECT_TRUE(test::tensors_equal(it->second, expected)) << name;
    return;
  }
  const auto a = test::to_doubles(it->second), b = test::to_doubles(expected);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
  if (absolute_tolerance >= 0) {
    EXPECT_LE(diff, absolute_tolerance) << name << ": absolute error " << diff;
    return;
  }
  const double err = diff / std::max(max_abs(expected), floor);
  EXPECT_LE(err, kMaxRelativeError) << name << ": relative error " << err;
}

void expect_step_matches(const std::string& optimizer, const std::string& flags, double lr) {
  const auto got = dump_step(optimizer, flags);
  ASSERT_FALSE(got.empty());
  expect_matches(got, "logits", fixture().all.at("expect.logits"));
  expect_matches(got, "loss", fixture().all.at("expect.loss"));
  double largest = 0;
  for (const auto& [name, t] : fixture().with_prefix("expect.grad.")) largest = std::max(largest, max_abs(t));
  int grads = 0, updated = 0;
  for (const auto& [name, t] : fixture().with_prefix("expect.grad."))
    expect_matches(got, "grad." + name, t, kGradientFloor * largest), ++grads;
  for (const auto& [name, t] : fixture().with_prefix(optimizer + ".")) {
    auto grad = fixture().all.find("expect.grad." + name);
    const bool zero_gradient = grad != fixture().all.end() && max_abs(grad->second) < kZeroGradient * largest;
    expect_matches(got, name, t, 0, zero_gradient && optimizer == "adamw" ? lr : -1);
    ++updated;
  }
  // Depth 18 with both attentions: 76 parameters, and 3 buffers in each of 20 BatchNorms.
  EXPECT_EQ(grads, 76);
  EXPECT_EQ(updated, 76 + 60);
}

TEST(TrainParity, SgdNesterovStepMatchesPyTorch) {
  expect_step_matches("sgd", "--optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --weight-decay 5e-4", 0.05);
}

TEST(TrainParity, AdamWStepMatchesPyTorch) {
  expect_step_matches("adamw", "--optimizer adamw --lr 1e-3 --weight-decay 0.01", 1e-3);
}

}  // namespace
}  // namespace gridnn
