// Reductions' contracts: output shapes, whole-tensor results, NaN and empty inputs, one
// order of additions on both CPU paths, errors. Their values along every dimension are op
// harness cases (test/ops/cases_reduce.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::random_tensor;
using test::to_doubles;
using ops::ReduceOp;

TEST(Reduce, KeepdimShapesAndFullReductions) {
  Tensor x = random_tensor({2, 3, 4}, 15);
  EXPECT_EQ(ops::sum(x, 1).shape(), (Shape{2, 4}));
  EXPECT_EQ(ops::sum(x, -1, true).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(ops::sum_all(x).shape(), (Shape{1}));
  double total = 0, sq = 0, mx = -INFINITY;
  for (double v : to_doubles(x)) {
    total += v;
    sq += v * v;
    mx = std::max(mx, v);
  }
  EXPECT_NEAR(to_doubles(ops::sum_all(x))[0], total, 1e-5);
  EXPECT_NEAR(to_doubles(ops::sum_squares_all(x))[0], sq, 1e-5);
  EXPECT_EQ(to_doubles(ops::max_all(x))[0], mx);
}

TEST(Reduce, MaxPropagatesNaNAndEmptySumIsZero) {
  Tensor x = Tensor::from_vector<float>({1, std::nanf(""), 3}, {3});
  EXPECT_TRUE(std::isnan(to_doubles(ops::max_all(x))[0]));
  Tensor empty = Tensor::zeros({2, 0});
  EXPECT_EQ(to_doubles(ops::sum(empty, 1)), (std::vector<double>{0, 0}));
  EXPECT_THROW(ops::max(empty, 1), Error);
}

TEST(Reduce, BothCpuPathsAddInTheSameOrder) {
  // Four rows reduced together take the one-output-per-thread path; one row alone (a
  // single output) takes the lanes-in-parallel path. The order of additions is fixed by
  // kernels/reduce_bodies.h, so the results must be bitwise equal.
  Tensor x = random_tensor({4, 10000}, 16);
  std::vector<float> rows = ops::sum(x, 1).to_vector<float>();
  for (int64_t r = 0; r < 4; ++r) {
    float alone = ops::sum_all(x.narrow(r, 1)).to_vector<float>()[0];
    EXPECT_EQ(alone, rows[size_t(r)]) << "row " << r;
  }
  EXPECT_TRUE(test::tensors_equal(ops::sum(x, 1), ops::sum(x, 1)));
}

TEST(Reduce, OutputMustNotAliasTheInput) {
  Tensor x = random_tensor({4, 3}, 17);
  Tensor out = x.narrow(0, 1).reshape({3});  // inside x
  EXPECT_THROW(ops::reduce(ReduceOp::sum, x, 0, out), Error);
}

TEST(Reduce, BadArguments) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(ops::sum(x, 2), Error);
  EXPECT_THROW(ops::sum(x, -3), Error);
  Tensor wrong = Tensor::zeros({3});
  EXPECT_THROW(ops::reduce(ReduceOp::sum, x, 1, wrong), Error);  // needs 2 outputs
  EXPECT_THROW(ops::sum(Tensor::zeros({2}, DType::i64), 0), Error);
}

}  // namespace
}  // namespace gridnn
