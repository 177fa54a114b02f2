// Reductions along each dimension against plain double loops.
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

// Reference: reduce dimension `dim` of a row-major tensor in double.
std::vector<double> reference(ReduceOp op, const Tensor& x, int dim) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1, len = s[dim];
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (int i = dim + 1; i < s.rank(); ++i) inner *= s[i];
  std::vector<double> v = to_doubles(x), out(size_t(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double acc = op == ReduceOp::max ? -INFINITY : 0.0;
      for (int64_t k = 0; k < len; ++k) {
        double e = v[size_t((o * len + k) * inner + in)];
        if (op == ReduceOp::sum) acc += e;
        if (op == ReduceOp::sum_squares) acc += e * e;
        if (op == ReduceOp::max) acc = std::max(acc, e);
      }
      out[size_t(o * inner + in)] = acc;
    }
  return out;
}

void expect_matches(ReduceOp op, const Tensor& x, int dim, double rtol) {
  Tensor got = ops::reduce(op, x, dim);
  std::vector<double> ref = reference(op, x, dim), g = to_doubles(got);
  ASSERT_EQ(g.size(), ref.size());
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], ref[i], rtol * (scale + 1)) << "op " << int(op) << " dim " << dim << " output " << i;
}

TEST(Reduce, EveryOpAndDimensionOfAnOddShape) {
  Tensor x = random_tensor({3, 5, 7, 2}, 11);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max})
    for (int dim = 0; dim < 4; ++dim) expect_matches(op, x, dim, 1e-6);
}

TEST(Reduce, LongRowsCrossManyLanes) {
  // len = 3001 > 256 lanes, with uneven lane loads; few outputs take the lane-parallel path.
  Tensor x = random_tensor({2, 3001}, 12);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max}) expect_matches(op, x, 1, 1e-6);
  Tensor y = random_tensor({3001, 2}, 13);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max}) expect_matches(op, y, 0, 1e-6);
}

TEST(Reduce, HalfInputsAccumulateInFloat) {
  // 4096 ones in bf16: a bf16 accumulator would stall at 256; f32 accumulation gives 4096.
  Tensor ones = Tensor::empty({4096}, DType::bf16);
  ops::fill(ones, 1.0);
  EXPECT_EQ(to_doubles(ops::sum_all(ones))[0], 4096.0);
  Tensor h = random_tensor({6, 300}, 14, -1, 1, DType::f16);
  expect_matches(ReduceOp::sum, h, 1, 2e-3);
}

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

TEST(Reduce, IsBitwiseDeterministic) {
  Tensor x = random_tensor({4, 10000}, 16);
  EXPECT_TRUE(test::tensors_equal(ops::sum(x, 1), ops::sum(x, 1)));
  EXPECT_TRUE(test::tensors_equal(ops::sum_all(x), ops::sum_all(x)));
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
