// ResAttNet3D and MLP: PyTorch's parameter names, output shapes, gradient checks of a
// BasicBlock (with and without downsample) and of the MLP, configuration errors, and the
// backward reports that gradient overlap starts buckets on.
// (The whole network against PyTorch: test_train_parity.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "models/nets/mlp.h"
#include "models/nets/resattnet3d.h"
#include "test/support/error_message.h"
#include "test/support/layer_check.h"
#include "test/support/random_tensor.h"

namespace gridnn {
namespace {

using test::error_message;
using test::random_tensor;

std::vector<std::string> names(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, p] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(ResAttNet3D, ParameterAndBufferNamesFollowPyTorch) {
  nn::ResAttNetConfig c;
  c.width = 4;
  c.classes = 3;
  nn::ResAttNet3D net(c);
  const auto n = names(net);
  ASSERT_EQ(n.size(), 76u);  // depth 18 with both attentions (counted in torch_modules.py)
  EXPECT_EQ(n.front(), "conv1.weight");
  EXPECT_EQ(n[1], "bn1.weight");
  EXPECT_EQ(n.back(), "fc.bias");
  const std::set<std::string> all(n.begin(), n.end());
  for (const char* want :
       {"layer1.0.conv1.weight", "layer1.1.bn2.bias", "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
        "layer4.1.conv2.weight", "att3.gamma", "att3.query.weight", "att4.value.bias", "fc.weight"})
    EXPECT_TRUE(all.count(want)) << want;
  EXPECT_FALSE(all.count("layer1.0.downsample.0.weight"));  // layer1 keeps the shape
  auto buffers = net.named_buffers();
  EXPECT_EQ(buffers.size(), 60u);
  EXPECT_EQ(buffers[0].first, "bn1.running_mean");
  EXPECT_EQ(buffers[2].first, "bn1.num_batches_tracked");

  c.depth = 34;
  c.attention3 = false;
  nn::ResAttNet3D deep(c);
  const auto d = names(deep);
  // 34: [3, 4, 6, 3] blocks = 16 blocks x 6 + 3 downsamples x 3 + stem 3 + att4 7 + fc 2.
  EXPECT_EQ(d.size(), 16u * 6 + 3 * 3 + 3 + 7 + 2);
  EXPECT_EQ(std::count(d.begin(), d.end(), "layer3.5.conv2.weight"), 1);
  EXPECT_EQ(std::count(d.begin(), d.end(), "att3.gamma"), 0);
}

TEST(ResAttNet3D, ForwardShapeAndBackwardReachesEveryParameter) {
  nn::ResAttNetConfig c;
  c.width = 2;
  c.in_channels = 2;
  c.classes = 5;
  nn::ResAttNet3D net(c);
  net.initialize(3);
  // Non-zero gammas, so the attention paths carry gradient too.
  for (auto& [name, p] : net.named_parameters())
    if (name.find("gamma") != std::string::npos) p->value.data<float>()[0] = 0.4f;
  Tensor x = random_tensor({2, 2, 33, 40, 36}, 5);  // layer4 at 2x2x2: att4 has 8 keys
  Tensor y = net.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 5}));
  EXPECT_FALSE(net.backward(random_tensor({2, 5}, 6)).defined());  // the input is data
  c.input_gradient = true;
  nn::ResAttNet3D with_dx(c);
  with_dx.initialize(3);
  with_dx.forward(x);
  EXPECT_EQ(with_dx.backward(random_tensor({2, 5}, 6)).shape(), x.shape());
  for (auto& [name, p] : net.named_parameters()) {
    double sum = 0;
    for (float g : p->grad.to_vector<float>()) sum += std::fabs(g);
    // The key bias shifts every key's score for a query by the same amount, which the
    // softmax ignores: its gradient is zero up to rounding.
    if (name.find("key.bias") != std::string::npos)
      EXPECT_LT(sum, 1e-6) << name;
    else
      EXPECT_GT(sum, 1e-6) << name << " got no gradient";
  }
}

// Records the modules whose backward finished, in order.
class BackwardLog : public nn::BackwardObserver {
 public:
  void on_backward_done(nn::Module& module) override { done.push_back(&module); }
  std::vector<nn::Module*> done;
};

// What gradient overlap relies on (docs/design.md §4): a network's backward reports each
// module that owns parameters once, when its own backward is done: after the modules inside
// it, before those around it. (ResAttNet3D's layerN containers only name their blocks: the
// network runs the blocks, so they are never run, nor reported, as a whole.)
void expect_parameter_owners_reported(nn::Module& net, const Tensor& x, size_t owner_count) {
  const Tensor dy = random_tensor(net.forward(x).shape(), 9);
  BackwardLog log;
  {
    nn::BackwardObserverScope scope(log);
    net.backward(dy);
  }
  // A parameter's owner is the innermost module that lists it; modules() puts it last.
  std::map<const nn::Parameter*, nn::Module*> owner;
  for (nn::Module* m : net.modules())
    for (auto& [name, p] : m->named_parameters()) owner[p] = m;
  std::set<nn::Module*> owners;
  for (const auto& [p, m] : owner) owners.insert(m);
  int64_t reports = 0;
  for (nn::Module* m : log.done) reports += int64_t(owners.count(m));
  EXPECT_EQ(owners.size(), owner_count);
  EXPECT_EQ(reports, int64_t(owners.size()));
  auto count = [&log](const nn::Module* m) { return std::count(log.done.begin(), log.done.end(), m); };
  for (nn::Module* m : owners) EXPECT_EQ(count(m), 1) << m->name();
  auto at = [&log](const nn::Module* m) { return std::find(log.done.begin(), log.done.end(), m) - log.done.begin(); };
  for (nn::Module* m : net.modules()) {
    EXPECT_LE(count(m), 1) << m->name();
    for (nn::Module* d : m->modules()) {
      if (count(d) && count(m)) {
        EXPECT_LE(at(d), at(m)) << d->name() << " after " << m->name();
      }
    }
  }
  EXPECT_EQ(log.done.back(), &net);
}

TEST(ResAttNet3D, BackwardReportsEveryModuleWithParameters) {
  nn::ResAttNetConfig c;
  c.width = 2;
  c.classes = 3;
  nn::ResAttNet3D net(c);
  net.name_modules();
  net.initialize(3);
  // stem conv1, bn1; 8 blocks of 4; 3 downsamples of 2; att3, att4 and their 3 projections each; fc
  expect_parameter_owners_reported(net, random_tensor({2, 1, 24, 24, 20}, 5), 2 + 8 * 4 + 3 * 2 + 2 * 4 + 1);
}

TEST(Mlp, BackwardReportsEveryModuleWithParameters) {
  nn::Mlp mlp({{24, 7, 5, 3}});
  mlp.name_modules();
  mlp.initialize(2);
  expect_parameter_owners_reported(mlp, random_tensor({4, 24}, 3), 3);  // fc1..fc3
}

TEST(ResAttNet3D, ConfigurationErrorsSayWhatToChange) {
  nn::ResAttNetConfig c;
  c.depth = 50;
  EXPECT_NE(error_message([&] { nn::ResAttNet3D n(c); }).find("depth must be 18 or 34"), std::string::npos);
  c.depth = 18;
  c.width = 3;  // att3 sees 12 channels
  EXPECT_NE(error_message([&] { nn::ResAttNet3D n(c); }).find("use an even width"), std::string::npos);
  c.attention3 = false;
  EXPECT_EQ(error_message([&] { nn::ResAttNet3D n(c); }), "(no error)");
  nn::ResAttNet3D net(c);
  EXPECT_NE(error_message([&] {
              net.forward(random_tensor({1, 2, 8, 8, 8}, 1));
            }).find("[B, 1, D, H, W]"),
            std::string::npos);
}

TEST(BasicBlock, GradientsWithDownsample) {
  nn::BasicBlock block(2, 4, 2);
  block.initialize(7);
  Tensor x = random_tensor({2, 2, 5, 4, 6}, 8);
  test::LayerCheckOptions o;
  o.grad.max_points = 40;
  o.grad.skip_kinks = true;
  EXPECT_TRUE(test::check_layer_gradients(block, x, o));
  EXPECT_EQ(block.named_parameters().size(), 9u);
}

TEST(BasicBlock, GradientsWithIdentityShortcut) {
  nn::BasicBlock block(3, 3, 1);
  block.initialize(9);
  Tensor x = random_tensor({2, 3, 4, 3, 5}, 10);
  test::LayerCheckOptions o;
  o.grad.max_points = 40;
  o.check_parameters = false;
  EXPECT_TRUE(test::check_layer_gradients(block, x, o));
  // A step in one conv1 weight moves every output (through two BatchNorms), and with a
  // step of 1e-3 a third of the checks cross a ReLU kink; at 3e-4 few do, and those are
  // detected and skipped.
  o.check_input = false;
  o.check_parameters = true;
  o.grad.skip_kinks = true;
  o.grad.eps = 3e-4;
  EXPECT_TRUE(test::check_layer_gradients(block, x, o));
  EXPECT_EQ(block.named_parameters().size(), 6u);
}

TEST(Mlp, NamesShapesAndGradients) {
  nn::Mlp mlp({{24, 7, 5, 3}});
  mlp.initialize(2);
  EXPECT_EQ(names(mlp),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  Tensor x = random_tensor({4, 2, 3, 2, 2}, 3);  // flattened to 24 features
  EXPECT_EQ(mlp.forward(x).shape(), (Shape{4, 3}));
  EXPECT_TRUE(test::check_layer_gradients(mlp, x));
  EXPECT_NE(error_message([] { nn::Mlp m({{5}}); }).find("at least the input and output"), std::string::npos);
  EXPECT_NE(error_message([&] { mlp.forward(random_tensor({4, 23}, 1)); }).find("24 features"), std::string::npos);
}

}  // namespace
}  // namespace gridnn
