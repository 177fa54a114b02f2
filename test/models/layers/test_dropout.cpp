// nn::Dropout and the dropout kernels (kernels/dropout.h): the mask against the Philox
// reference of test/ops/reference_layers.h, scaling, identity cases, reproducibility, grid
// invariance, gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "models/layers/dropout.h"
#include "test/ops/reference_layers.h"
#include "test/support/error_message.h"
#include "test/support/layer_check.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using test::random_tensor;
using test::to_doubles;

TEST(Dropout, MatchesPhiloxMaskAndScale) {
  const float p = 0.3f;
  Tensor x = random_tensor({3, 5, 7}, 1, 0.5f, 1.5f);  // no zeros in x: a zero in y means dropped
  ops::DropoutKey key{11, 22, 3, 0};
  Tensor y = Tensor::empty(x.shape());
  ops::dropout_forward(x, p, key, y);
  const std::vector<double> yd = to_doubles(y), expected = test::reference_dropout(to_doubles(x), p, key);
  int64_t dropped = 0;
  for (size_t i = 0; i < yd.size(); ++i) {
    EXPECT_EQ(yd[i], expected[i]) << i;
    dropped += expected[i] == 0.0 ? 1 : 0;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, int64_t(yd.size()));
}

TEST(Dropout, DropRateIsAboutP) {
  nn::Dropout d(0.25f);
  d.initialize(3);
  Tensor ones = Tensor::empty({100, 1000});
  ops::fill(ones, 1.0);
  std::vector<double> y = to_doubles(d.forward(ones));
  int64_t zeros = 0;
  double kept_value = 0;
  for (double v : y) {
    if (v == 0.0)
      ++zeros;
    else
      kept_value = v;
  }
  EXPECT_NEAR(double(zeros) / double(y.size()), 0.25, 0.01);
  EXPECT_NEAR(kept_value, 1.0 / 0.75, 1e-5);
}

TEST(Dropout, IdentityForPZeroAndInEval) {
  Tensor x = random_tensor({4, 9}, 5);
  nn::Dropout zero(0.0f);
  EXPECT_TRUE(test::tensors_equal(zero.forward(x), x));
  EXPECT_TRUE(test::tensors_equal(zero.backward(x), x));
  nn::Dropout d(0.5f);
  d.eval();
  EXPECT_TRUE(test::tensors_equal(d.forward(x), x));
  EXPECT_TRUE(test::tensors_equal(d.backward(x), x));
  d.train();
  EXPECT_FALSE(test::tensors_equal(d.forward(x), x));
}

TEST(Dropout, POneDropsEverything) {
  nn::Dropout d(1.0f);
  Tensor x = random_tensor({3, 4}, 6);
  for (double v : to_doubles(d.forward(x))) EXPECT_EQ(v, 0.0);
}

TEST(Dropout, ReproducibleWithinAStepNewMaskPerStep) {
  nn::Dropout d(0.5f);
  d.initialize(9);
  Tensor x = random_tensor({6, 50}, 7);
  d.set_step(4);
  Tensor a = d.forward(x), b = d.forward(x);
  EXPECT_TRUE(test::tensors_equal(a, b));
  d.set_step(5);
  EXPECT_FALSE(test::tensors_equal(d.forward(x), a));
  // The layer's full name picks the stream: another name, another mask.
  nn::Dropout other(0.5f);
  other.set_key(9, "head.dropout.mask");
  other.set_step(4);
  EXPECT_FALSE(test::tensors_equal(other.forward(x), a));
}

TEST(Dropout, BatchShardsDrawTheMaskOfTheFullBatch) {
  nn::Dropout full(0.4f), shard(0.4f);
  full.set_key(1, "mask");
  shard.set_key(1, "mask");
  Tensor x = random_tensor({6, 3, 5}, 8);
  Tensor y = full.forward(x);
  shard.set_batch_offset(2);
  Tensor ys = shard.forward(x.narrow(2, 3).clone());
  EXPECT_TRUE(test::tensors_equal(ys, y.narrow(2, 3).clone()));
}

TEST(Dropout, BackwardAppliesTheForwardMask) {
  for (int64_t n : {1, 3}) {
    nn::Dropout d(0.35f);
    d.initialize(13);
    d.set_step(2);
    Tensor x = random_tensor({n, 4, 3}, 14);
    test::LayerCheckOptions o;
    o.check_parameters = false;
    EXPECT_TRUE(test::check_layer_gradients(d, x, o));
    // Changing the step after forward does not change the mask backward uses.
    Tensor y = d.forward(x);
    d.set_step(3);
    Tensor dy = random_tensor(x.shape(), 15);
    std::vector<double> dx = to_doubles(d.backward(dy)), yd = to_doubles(y), xd = to_doubles(x), dyd = to_doubles(dy);
    for (size_t i = 0; i < dx.size(); ++i) {
      const double factor = yd[i] / xd[i];
      EXPECT_NEAR(dx[i], dyd[i] * factor, 1e-6) << i;
    }
  }
}

TEST(Dropout, BadArgumentsNameTheLayer) {
  const std::string made = test::error_message([&] { nn::Dropout bad(1.5f); });
  EXPECT_NE(made.find("Dropout(p=1.5)"), std::string::npos) << made;
  nn::Dropout d(0.5f);
  EXPECT_THROW(d.backward(random_tensor({2, 2}, 1)), Error);
  d.forward(random_tensor({2, 3}, 1));
  const std::string what = test::error_message([&] { d.backward(random_tensor({3, 2}, 1)); });
  EXPECT_NE(what.find("Dropout"), std::string::npos) << what;
  EXPECT_NE(what.find("[3, 2]"), std::string::npos) << what;
  EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
}

}  // namespace
}  // namespace gridnn
