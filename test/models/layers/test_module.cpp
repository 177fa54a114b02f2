// The Module API: names, registration, modes, zero_grad, Sequential, backward reports, and
// the basic parameter-free layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "models/dist/attention.h"
#include "models/dist/domain_parallel.h"
#include "models/dist/global_pool.h"
#include "models/dist/input_split_linear.h"
#include "models/dist/linear.h"
#include "models/dist/replicated.h"
#include "models/layers/activation.h"
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/conv3d.h"
#include "models/layers/dropout.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"
#include "models/nets/mlp.h"
#include "models/nets/resattnet3d.h"
#include "test/support/layer_check.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

// y = x * scale (element-wise, scale a parameter of x's shape); counts resets.
class Scale : public nn::Module {
 public:
  explicit Scale(const Shape& shape) {
    weight_ = &register_parameter("weight", Tensor::zeros(shape));
    register_buffer("calls", Tensor::zeros({1}, DType::i64));
  }
  Tensor forward(const Tensor& x) override {
    input_ = x;
    Tensor y = Tensor::empty(x.shape());
    ops::mul(x, weight_->value, y);
    return y;
  }
  int mode_changes = 0;

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override {
    last_prefix = prefix;
    ops::uniform_(weight_->value, -1, 1, ops::RandomKey::named(seed, prefix + "weight"));
  }
  void on_mode_change() override { ++mode_changes; }

 public:
  std::string last_prefix;

 private:
  Tensor do_backward(const Tensor& dy) override {
    Tensor dx = Tensor::empty(dy.shape()), dw = Tensor::empty(dy.shape());
    ops::mul(dy, weight_->value, dx);
    ops::mul(dy, input_, dw);
    ops::axpy(1.0f, dw, weight_->grad);  // parameter gradients accumulate
    return dx;
  }

  nn::Parameter* weight_;
  Tensor input_;
};

TEST(Module, NamesFollowPyTorchStateDict) {
  nn::Sequential net;
  auto& inner = net.add(std::make_unique<nn::Sequential>(), "layer1");
  inner.add(std::make_unique<Scale>(Shape{3}));
  inner.add(std::make_unique<nn::ReLU>());
  inner.add(std::make_unique<Scale>(Shape{3}));
  net.add(std::make_unique<Scale>(Shape{3}), "fc");
  std::vector<std::string> names;
  for (auto& [n, p] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"layer1.0.weight", "layer1.2.weight", "fc.weight"}));
  std::vector<std::string> buffers;
  for (auto& [n, b] : net.named_buffers()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"layer1.0.calls", "layer1.2.calls", "fc.calls"}));
}

TEST(Module, InitializeIsKeyedByFullNameNotOrder) {
  // The same parameter name gets the same values in differently built models.
  nn::Sequential a, b;
  a.add(std::make_unique<Scale>(Shape{4}), "x");
  a.add(std::make_unique<Scale>(Shape{4}), "y");
  b.add(std::make_unique<Scale>(Shape{4}), "y");
  a.initialize(5);
  b.initialize(5);
  EXPECT_TRUE(test::tensors_equal(a.named_parameters()[1].second->value, b.named_parameters()[0].second->value));
  EXPECT_FALSE(test::tensors_equal(a.named_parameters()[0].second->value, a.named_parameters()[1].second->value));
}

TEST(Module, GradientsAccumulateUntilZeroGrad) {
  Scale s({3});
  s.initialize(1);
  Tensor x = test::random_tensor({3}, 2), dy = test::random_tensor({3}, 3);
  s.forward(x);
  s.backward(dy);
  Tensor once = s.named_parameters()[0].second->grad.clone();
  s.forward(x);
  s.backward(dy);
  Tensor twice = once.clone();
  ops::scale(twice, 2.0f);
  EXPECT_TRUE(test::tensors_close(s.named_parameters()[0].second->grad, twice));
  s.zero_grad();
  for (double v : test::to_doubles(s.named_parameters()[0].second->grad)) EXPECT_EQ(v, 0.0);
}

TEST(Module, TrainAndEvalReachEveryChild) {
  nn::Sequential net;
  auto& leaf = net.add(std::make_unique<Scale>(Shape{1}));
  EXPECT_TRUE(leaf.is_training());
  net.eval();
  EXPECT_FALSE(leaf.is_training());
  EXPECT_EQ(leaf.mode_changes, 1);
  net.train();
  EXPECT_TRUE(leaf.is_training());
}

TEST(Module, SequentialGradientsMatchCentralDifferences) {
  nn::Sequential net;
  net.add(std::make_unique<Scale>(Shape{2, 5}));
  net.add(std::make_unique<nn::ReLU>());
  net.add(std::make_unique<Scale>(Shape{2, 5}));
  net.initialize(7);
  Tensor x = test::random_tensor({2, 5}, 8);
  test::LayerCheckOptions o;
  o.grad.skip = [&](int64_t) { return false; };
  EXPECT_TRUE(test::check_layer_gradients(net, x, o));
}

// Whether code outside module M can call its do_backward. It must not: every backward runs
// through Module::backward, which reports it to the BackwardObserver (gradient overlap).
// Access is checked during substitution, so a private do_backward gives false.
template <class M, class = void>
struct CallsDoBackward : std::false_type {};
template <class M>
struct CallsDoBackward<M, std::void_t<decltype(std::declval<M&>().do_backward(std::declval<const Tensor&>()))>>
    : std::true_type {};
template <class... M>
constexpr bool kNoneCallable = (!CallsDoBackward<M>::value && ...);

struct PublicDoBackward {  // the check itself works
  Tensor do_backward(const Tensor& dy) { return dy; }
};
static_assert(CallsDoBackward<PublicDoBackward>::value);
static_assert(kNoneCallable<nn::Module, nn::Sequential, Scale, nn::ReLU, nn::Flatten, nn::Conv3d, nn::BatchNorm3d,
                            nn::Linear, nn::Dropout, nn::MaxPool3d, nn::AvgPool3d, nn::GlobalAvgPool3d,
                            nn::PointwiseConv3d, nn::SelfAttention3d, nn::BasicBlock, nn::ResAttNet3D, nn::Mlp>);
static_assert(kNoneCallable<nn::DomainParallel, nn::DistSelfAttention3d, nn::DistGlobalAvgPool3d, nn::DistLinear,
                            nn::InputSplitLinear, nn::GatherDepth, nn::Replicated>);

// Records the modules whose backward finished, in order.
class BackwardLog : public nn::BackwardObserver {
 public:
  void on_backward_done(nn::Module& module) override { done.push_back(&module); }
  int64_t count(const nn::Module* m) const { return std::count(done.begin(), done.end(), m); }
  std::vector<nn::Module*> done;
};

TEST(Module, EveryBackwardIsReportedOnceAfterItsChildren) {
  nn::Sequential net;
  auto& inner = net.add(std::make_unique<nn::Sequential>());
  auto& first = inner.add(std::make_unique<Scale>(Shape{3}));
  inner.add(std::make_unique<nn::ReLU>());
  auto& last = net.add(std::make_unique<Scale>(Shape{3}));
  net.initialize(4);
  net.forward(test::random_tensor({3}, 5));
  BackwardLog log;
  {
    nn::BackwardObserverScope scope(log);
    net.backward(test::random_tensor({3}, 6));
  }
  net.forward(test::random_tensor({3}, 5));   // a backward frees what its forward kept
  net.backward(test::random_tensor({3}, 6));  // no observer: nothing to tell
  EXPECT_EQ(log.done, (std::vector<nn::Module*>{&last, inner.modules()[2], &first, &inner, &net}));
}

TEST(Layers, FlattenAndReluShapesAndErrors) {
  nn::Flatten flat;
  Tensor x = test::random_tensor({2, 3, 4}, 9);
  Tensor y = flat.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(flat.backward(y).shape(), x.shape());
  nn::ReLU relu;
  EXPECT_THROW(relu.backward(y), Error);  // before forward
  relu.forward(x);
  try {
    relu.backward(y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ReLU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gridnn
