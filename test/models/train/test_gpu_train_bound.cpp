// The bounds of test_gpu_train (gpu_train_runs.h), between two summation orders of the same
// fp32 steps that the CPU has: oneDNN (with the one-channel planes) and vol2col + GEMM; and
// the growth over three steps that kThreeStepTolerance assumes. Skipped in a build without
// oneDNN, where both are vol2col and the results are the same bits.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "core/safetensors.h"
#include "kernels/conv3d.h"
#include "test/models/train/gpu_train_runs.h"
#include "test/support/temp_dir.h"
#include "test/support/tensor_compare.h"

namespace gridnn::test {
namespace {

// The largest relative error over the tensors both maps hold, and where.
std::pair<double, std::string> largest_error(const std::map<std::string, Tensor>& a,
                                             const std::map<std::string, Tensor>& b) {
  std::pair<double, std::string> worst{0.0, ""};
  for (const auto& [name, ref] : b) {
    if (ref.dtype() != DType::f32 || name.find("key.bias") != std::string::npos) continue;
    const double e = max_relative_error(a.at(name), ref);
    if (e > worst.first) worst = {e, name};
  }
  return worst;
}

TEST(GpuTrainBound, TwoCpuSummationOrdersStayWithinTheBound) {
  const TempDir temp("gpu_train_bound");
  const train::TrainOptions o = three_steps(Device::cpu());
  const std::string batch = (temp.path() / "batch.safetensors").string();
  save_batch(o, batch);
  std::map<std::string, Tensor> one[2], three[2];
  const ops::CpuConv orders[2] = {ops::CpuConv::onednn, ops::CpuConv::vol2col};
  const ops::CpuConv before = ops::cpu_conv();
  for (int i = 0; i < 2; ++i) {
    ops::set_cpu_conv(orders[i]);
    const std::string out = (temp.path() / ("step" + std::to_string(i) + ".safetensors")).string();
    train::dump_step(o, batch, out);
    one[i] = load_safetensors(out).tensors;
    three[i] = after_training(o);
  }
  ops::set_cpu_conv(before);
  const auto [e1, at1] = largest_error(one[0], one[1]);
  const auto [e3, at3] = largest_error(three[0], three[1]);
  if (e1 == 0 && e3 == 0) GTEST_SKIP() << "one summation order only (a build without oneDNN)";
  std::printf("oneDNN against vol2col + GEMM: one step %.3g at %s, three steps %.3g at %s\n", e1, at1.c_str(), e3,
              at3.c_str());
  EXPECT_LE(e1, kStepTolerance) << at1;
  EXPECT_LE(e3, kThreeStepTolerance) << at3;
  EXPECT_LE(e3, kThreeStepGrowth * e1) << "three steps " << at3 << ", one step " << at1;
}

}  // namespace
}  // namespace gridnn::test
