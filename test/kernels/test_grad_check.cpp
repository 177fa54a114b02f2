// The gradient checker itself: it must pass a right gradient and catch a wrong one.
#include <gtest/gtest.h>

#include <cmath>

#include "test/support/grad_check.h"
#include "test/support/random_tensor.h"

namespace gridnn {
namespace {

TEST(GradCheck, AcceptsTheRightGradientOfACubic) {
  // L = sum(x^3 / 3) has gradient x^2.
  Tensor x = test::random_tensor({30}, 1);
  auto loss = [&] {
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += std::pow(double(x.data<float>()[i]), 3) / 3;
    return s;
  };
  Tensor g = Tensor::empty({30});
  for (int64_t i = 0; i < 30; ++i) g.data<float>()[i] = x.data<float>()[i] * x.data<float>()[i];
  EXPECT_TRUE(test::check_gradient(loss, x, g));
}

TEST(GradCheck, RejectsAWrongGradientAndRestoresTheInput) {
  Tensor x = test::random_tensor({30}, 2);
  Tensor before = x.clone();
  auto loss = [&] {
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += 2.0 * x.data<float>()[i];
    return s;
  };
  Tensor wrong = Tensor::empty({30});
  for (int64_t i = 0; i < 30; ++i) wrong.data<float>()[i] = i == 17 ? 2.5f : 2.0f;  // one bad entry
  ::testing::AssertionResult r = test::check_gradient(loss, x, wrong);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("flat 17"), std::string::npos) << r.message();
  EXPECT_EQ(x.to_vector<float>(), before.to_vector<float>());
}

TEST(GradCheck, SamplesLargeTensorsAndHonoursSkip) {
  Tensor x = test::random_tensor({1000}, 3);
  auto loss = [&] {
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += x.data<float>()[i];
    return s;
  };
  Tensor g = Tensor::empty({1000});
  for (int64_t i = 0; i < 1000; ++i) g.data<float>()[i] = 1.0f;
  g.data<float>()[0] = 5.0f;  // wrong, but skipped
  test::GradCheckOptions o;
  o.skip = [](int64_t i) { return i == 0; };
  EXPECT_TRUE(test::check_gradient(loss, x, g, o));
}

}  // namespace
}  // namespace gridnn
