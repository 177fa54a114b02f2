// Conv3d's contracts the op harness does not express (its values against double loops, its
// gradients and the CUDA backend are cases of test/ops/cases_conv3d.cpp): the output size
// formula, determinism across calls, accumulation of the parameter gradients, PyTorch's
// names and initialization bounds, the error messages, and the memory its record states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/size_class.h"
#include "kernels/conv3d.h"
#include "kernels/elementwise.h"
#include "models/layers/conv3d.h"
#include "plan/cost_model.h"
#include "test/support/conv3d_cases.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using ops::Triple;

using Case = test::Conv3dCase;
using test::geometry_of;
const std::vector<Case>& cases() { return test::conv3d_cases(); }

Shape x_shape(const Case& k) { return {k.n, k.c, k.in[0], k.in[1], k.in[2]}; }
Shape w_shape(const Case& k) { return {k.o, k.c, k.kernel[0], k.kernel[1], k.kernel[2]}; }

constexpr test::Tolerance kTol{1e-4, 1e-4};

TEST(Conv3dOps, OutputSizeFollowsTheFormula) {
  auto g = ops::conv3d_geometry("t", 1, 1, {7, 3, 1}, {2, 2, 1}, {3, 1, 0}, {64, 9, 5});
  EXPECT_EQ(g.out_size[0], 32);  // (64 + 6 - 7) / 2 + 1
  EXPECT_EQ(g.out_size[1], 5);   // (9 + 2 - 3) / 2 + 1
  EXPECT_EQ(g.out_size[2], 5);
  EXPECT_EQ(ops::conv3d_output_shape(g, 2), (Shape{2, 1, 32, 5, 5}));
}

TEST(Conv3dOps, AreDeterministic) {
  const Case& k = cases().back();  // threaded loops
  const ops::Conv3dGeometry g = geometry_of(k);
  Tensor x = test::random_tensor(x_shape(k), 1), w = test::random_tensor(w_shape(k), 2);
  Tensor dy = test::random_tensor(ops::conv3d_output_shape(g, k.n), 4);
  Tensor dx1 = Tensor::empty(x.shape()), dx2 = Tensor::empty(x.shape());
  Tensor dw1 = Tensor::zeros(w.shape()), dw2 = Tensor::zeros(w.shape());
  ops::conv3d_backward_data(dy, w, g, dx1);
  ops::conv3d_backward_data(dy, w, g, dx2);
  ops::conv3d_backward_filter(x, dy, g, dw1);
  ops::conv3d_backward_filter(x, dy, g, dw2);
  EXPECT_TRUE(test::tensors_equal(dx1, dx2));
  EXPECT_TRUE(test::tensors_equal(dw1, dw2));
}

// ---- the layer -----------------------------------------------------------------------

std::unique_ptr<nn::Conv3d> layer_for(const Case& k, bool bias = true) {
  auto conv = std::make_unique<nn::Conv3d>(k.c, k.o, k.kernel, k.stride, k.padding, bias);
  conv->initialize(11);
  return conv;
}

TEST(Conv3dLayer, ParameterGradientsAccumulateDataGradientOverwrites) {
  const Case& k = cases()[6];
  auto conv = layer_for(k);
  Tensor x = test::random_tensor(x_shape(k), 41);
  Tensor y = conv->forward(x);
  Tensor dy = test::random_tensor(y.shape(), 42);
  Tensor dx1 = conv->backward(dy);
  Tensor dw1 = conv->weight().grad.clone(), db1 = conv->bias()->grad.clone();
  conv->forward(x);
  Tensor dx2 = conv->backward(dy);
  ops::scale(dw1, 2.0f);
  ops::scale(db1, 2.0f);
  EXPECT_TRUE(test::tensors_close(conv->weight().grad, dw1, kTol)) << "dw after two backwards = 2x";
  EXPECT_TRUE(test::tensors_close(conv->bias()->grad, db1, kTol)) << "db after two backwards = 2x";
  EXPECT_TRUE(test::tensors_equal(dx1, dx2)) << "dx is not accumulated";
  conv->zero_grad();
  for (double v : test::to_doubles(conv->weight().grad)) ASSERT_EQ(v, 0.0);
}

TEST(Conv3dLayer, ParametersFollowPyTorchNamesAndInitialization) {
  nn::Conv3d conv(4, 6, Triple{3, 2, 1});
  auto params = conv.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second->value.shape(), (Shape{6, 4, 3, 2, 1}));
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[1].second->value.shape(), (Shape{6}));
  EXPECT_EQ(nn::Conv3d(4, 6, 3, 1, 1, false).named_parameters().size(), 1u);

  conv.initialize(3);
  const double bound = 1.0 / std::sqrt(4.0 * 3 * 2 * 1);
  for (auto& [name, p] : params) {
    auto v = test::to_doubles(p->value);
    double lo = 1e9, hi = -1e9;
    for (double e : v) {
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
    EXPECT_GE(lo, -bound) << name;
    EXPECT_LT(hi, bound) << name;
    EXPECT_GT(hi - lo, bound * (name == "weight" ? 1.5 : 0.2)) << name << ": values should spread";
  }
}

// ---- errors --------------------------------------------------------------------------

// Runs f, expects gridnn::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

TEST(Conv3dLayer, BadInputsNameTheLayerAndShapes) {
  nn::Conv3d conv(3, 4, 3, 1, 0);
  conv.initialize(1);
  expect_error(
      [&] {
        conv.forward(test::random_tensor({2, 5, 6, 6, 6}, 1));
      },
      {"Conv3d", "[2, 5, 6, 6, 6]", "5 channels", "expects 3", "[4, 3, 3, 3, 3]"});
  expect_error([&] { conv.forward(test::random_tensor({3, 6, 6, 6}, 1)); }, {"Conv3d", "5-D", "[3, 6, 6, 6]"});
  expect_error(
      [&] {
        conv.forward(test::random_tensor({1, 3, 6, 2, 6}, 1));
      },
      {"Conv3d", "[1, 3, 6, 2, 6]", "larger than the padded input", "height", "kernel [3, 3, 3]"});
  expect_error([&] { conv.backward(test::random_tensor({1, 4, 4, 4, 4}, 1)); }, {"Conv3d", "before forward"});
  conv.forward(test::random_tensor({1, 3, 6, 6, 6}, 1));
  expect_error(
      [&] {
        conv.backward(test::random_tensor({1, 4, 3, 4, 4}, 1));
      },
      {"Conv3d", "[1, 4, 3, 4, 4]", "[1, 4, 4, 4, 4]"});
  expect_error([&] { nn::Conv3d(3, 4, Triple{3, 0, 3}); }, {"Conv3d", "[3, 0, 3]"});
  expect_error([&] { nn::Conv3d(0, 4, 3); }, {"Conv3d", "positive"});
}

TEST(Conv3dOps, BadArgumentsNameTheOpAndShapes) {
  const auto g = ops::conv3d_geometry("t", 2, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {4, 4, 4});
  Tensor x = test::random_tensor({1, 2, 4, 4, 4}, 1), w = test::random_tensor({3, 2, 3, 3, 3}, 2);
  Tensor y = Tensor::empty({1, 3, 4, 4, 4});
  Tensor bad_w = test::random_tensor({3, 2, 3, 3, 1}, 2);
  expect_error([&] { ops::conv3d_forward(x, bad_w, Tensor(), g, y); },
               {"conv3d_forward", "[3, 2, 3, 3, 1]", "[3, 2, 3, 3, 3]"});
  Tensor bad_y = Tensor::empty({1, 3, 4, 4, 5});
  expect_error([&] { ops::conv3d_forward(x, w, Tensor(), g, bad_y); }, {"conv3d_forward", "[1, 3, 4, 4, 5]"});
  expect_error([&] { ops::conv3d_forward(x, w, test::random_tensor({4}, 3), g, y); }, {"conv3d_forward", "bias"});
  Tensor dx = Tensor::empty({1, 2, 4, 4, 3});
  expect_error([&] { ops::conv3d_backward_data(y, w, g, dx); }, {"conv3d_backward_data", "[1, 2, 4, 4, 3]"});
  Tensor dw = Tensor::zeros({3, 2, 3, 3, 3}, DType::bf16);
  expect_error([&] { ops::conv3d_backward_filter(x, y, g, dw); }, {"conv3d_backward_filter", "f32"});
  Tensor db = Tensor::zeros({2});
  expect_error([&] { ops::conv3d_backward_bias(y, db); }, {"conv3d_backward_bias", "[2]", "[3]"});
  expect_error(
      [&] {
        ops::conv3d_geometry("probe", 1, 1, {3, 3, 3}, {1, 0, 1}, {0, 0, 0}, {4, 4, 4});
      },
      {"probe", "stride [1, 0, 1]"});
  expect_error(
      [&] {
        ops::conv3d_geometry("probe", 1, 1, {5, 3, 3}, {1, 1, 1}, {0, 0, 0}, {4, 4, 4});
      },
      {"probe", "larger than the padded input", "depth"});
  expect_error(
      [&] {
        ops::conv3d_geometry("probe", 1, 1, {3, 3, 3}, {1, 1, 1}, {-1, 0, 0}, {4, 4, 4});
      },
      {"probe", "negative"});
}

// The host's requests made while it lives, in their size classes (what the host allocator
// counts): the bytes in use of them and their high-water mark since reset(). A front
// (set_front_allocator): the blocks it hands out must be freed before it goes.
class HostRequests final : public Allocator {
 public:
  HostRequests() { set_front_allocator(Device::cpu(), this); }
  ~HostRequests() override { set_front_allocator(Device::cpu(), nullptr); }
  HostRequests(const HostRequests&) = delete;
  HostRequests& operator=(const HostRequests&) = delete;

  void* allocate(size_t bytes) override {
    void* p = host_allocator().allocate(bytes);
    const int64_t size = int64_t(size_class(SizeClasses::host, bytes, host_page_size()));
    const std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = size;
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= sizes_.at(p);
      sizes_.erase(p);
    }
    host_allocator().deallocate(p, bytes);
  }
  AllocatorStats stats() const override { return host_allocator().stats(); }
  Device device() const override { return Device::cpu(); }
  void set_limit(size_t bytes) override { host_allocator().set_limit(bytes); }

  void reset() { peak_ = in_use_; }
  int64_t peak_above_reset(int64_t at_reset) const { return peak_ - at_reset; }
  int64_t in_use() const { return in_use_; }

 private:
  std::mutex mu_;  // the kernels' threads may allocate too
  std::unordered_map<void*, int64_t> sizes_;
  int64_t in_use_ = 0, peak_ = 0;
};

// The memory model's record of a convolution (LayerMemory, docs/design.md §6a) is what its
// passes allocate: forward its output and forward scratch, backward its input gradient and
// backward scratch, to the byte. Measured on a second step, once the per-thread workspace
// (stated apart) has grown. Cases: bf16 on a kernel of which only the centre taps reach a
// 1 x 1 plane (the rounded copies are of the weights on those taps), and the stem's one input
// channel in fp32 (the partials of the backward filter by planes are backward's alone).
TEST(Conv3dLayer, ItsMemoryRecordIsWhatItsPassesAllocate) {
  struct Layer {
    nn::Conv3d conv;
    Shape in;
    ops::MathMode math;
  };
  Layer layers[] = {{nn::Conv3d(8, 8, 3, 1, 1), {2, 8, 4, 1, 1}, ops::MathMode::bf16},
                    {nn::Conv3d(1, 8, 7, 2, 3), {2, 1, 16, 12, 12}, ops::MathMode::fp32}};
  for (Layer& c : layers) {
    SCOPED_TRACE(c.in.str() + (c.math == ops::MathMode::bf16 ? " bf16" : " fp32"));
    c.conv.set_math_mode(c.math);
    const Tensor x = test::random_tensor(c.in, 3);
    const Tensor dy0 = test::random_tensor(c.conv.forward(x).shape(), 4);
    c.conv.backward(dy0);  // the workspace grows to its size
    plan::RankStep step;
    c.conv.describe(c.in, step);
    const plan::LayerMemory& m = step.memory.back();
    HostRequests requests;
    {
      Tensor y = c.conv.forward(x);
      EXPECT_EQ(requests.peak_above_reset(0), m.output + m.forward_scratch);
      Tensor dy = dy0.clone();
      const int64_t before = requests.in_use();
      requests.reset();
      Tensor dx = c.conv.backward(dy);
      EXPECT_EQ(requests.peak_above_reset(before), m.input_grad + m.backward_scratch);
    }
  }
}

}  // namespace
}  // namespace gridnn
