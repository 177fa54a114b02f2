// Reductions' contracts: output shapes, whole-tensor results, NaN and empty inputs, the
// order of kernels/reduce_bodies.h on every CPU loop and thread count, errors. Their values
// along every dimension are op harness cases (test/ops/cases_reduce.cpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "kernels/reduce.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using ops::ReduceOp;
using test::random_tensor;
using test::to_doubles;

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

TEST(Reduce, RowsAloneAndTogetherAddInTheSameOrder) {
  // Four rows reduced together share the threads with each other; one row alone (a
  // whole-tensor reduction) has its three segments to itself. The order of additions is
  // fixed by kernels/reduce_bodies.h, so the results must be bitwise equal.
  Tensor x = random_tensor({4, 10000}, 16);
  std::vector<float> rows = ops::sum(x, 1).to_vector<float>();
  for (int64_t r = 0; r < 4; ++r) {
    float alone = ops::sum_all(x.narrow(r, 1)).to_vector<float>()[0];
    EXPECT_EQ(alone, rows[size_t(r)]) << "row " << r;
  }
  EXPECT_TRUE(test::tensors_equal(ops::sum(x, 1), ops::sum(x, 1)));
}

// Every output in the order kernels/reduce_bodies.h states, one segment and one lane at a
// time as the CUDA threads run it (body::reduce_lane), then the tree
// (body::reduce_tree_step), then the fold of the segments (body::reduce_fold).
Tensor reduce_in_stated_order(ReduceOp op, const Tensor& x, int dim) {
  kernels::body::ReduceShape s{1, x.size(dim), 1};
  for (int d = 0; d < dim; ++d) s.outer *= x.size(d);
  for (int d = dim + 1; d < x.rank(); ++d) s.inner *= x.size(d);
  const int64_t n_out = s.outer * s.inner, segments = kernels::reduce_segments(s.len);
  std::vector<float> out(static_cast<size_t>(n_out)), partial(static_cast<size_t>(n_out * segments));
  kernels::visit_reduce(op, [&](auto o) {
    using Op = decltype(o);
    const int lanes = kernels::reduce_lanes(s.len);
    for (int64_t i = 0; i < n_out; ++i)
      for (int64_t k = 0; k < segments; ++k) {
        std::vector<float> lane(static_cast<size_t>(lanes));
        for (int l = 0; l < lanes; ++l)
          lane[size_t(l)] =
              kernels::body::reduce_lane<Op>(x.data<float>(), s, i, kernels::reduce_segment(s.len, k), l, lanes);
        for (int width = lanes / 2; width > 0; width /= 2)
          for (int l = 0; l < width; ++l) kernels::body::reduce_tree_step<Op>(lane.data(), l, width);
        partial[size_t(k * n_out + i)] = lane[0];
      }
    for (int64_t i = 0; i < n_out; ++i)
      out[size_t(i)] =
          segments == 1 ? partial[size_t(i)] : kernels::body::reduce_fold<Op>(partial.data(), n_out, i, segments);
  });
  return Tensor::from_vector(out, {n_out});
}

TEST(Reduce, SegmentsDependOnTheLengthAlone) {
  // The segments of a reduced dimension are a function of its length (nothing else goes
  // in): they tile [0, len) in order, every one but the last kReduceSegment long, the last
  // 1..kReduceSegment long; one segment (the whole dimension) up to kReduceSegment, empty
  // dimensions included. Lanes are the same for every segment.
  using kernels::kReduceSegment;
  EXPECT_EQ(kernels::reduce_segments(0), 1);
  EXPECT_EQ(kernels::reduce_segments(1), 1);
  EXPECT_EQ(kernels::reduce_segments(kReduceSegment), 1);
  EXPECT_EQ(kernels::reduce_segments(kReduceSegment + 1), 2);
  EXPECT_EQ(kernels::reduce_segments(2 * kReduceSegment), 2);
  EXPECT_EQ(kernels::reduce_segments(2 * kReduceSegment + 1), 3);
  EXPECT_EQ(kernels::reduce_segments((int64_t(1) << 21) + 7), 513);
  EXPECT_EQ(kernels::reduce_segment(0, 0).begin, 0);
  EXPECT_EQ(kernels::reduce_segment(0, 0).end, 0);
  for (int64_t len : {int64_t(1), int64_t(255), kReduceSegment - 1, kReduceSegment, kReduceSegment + 1,
                      3 * kReduceSegment, 3 * kReduceSegment + 17, int64_t(70000)}) {
    SCOPED_TRACE("len " + std::to_string(len));
    const int64_t n = kernels::reduce_segments(len);
    int64_t next = 0;
    for (int64_t k = 0; k < n; ++k) {
      const kernels::ReduceSegment seg = kernels::reduce_segment(len, k);
      EXPECT_EQ(seg.begin, next);
      EXPECT_GT(seg.end, seg.begin);
      EXPECT_LE(seg.end - seg.begin, kReduceSegment);
      if (k + 1 < n) {
        EXPECT_EQ(seg.end - seg.begin, kReduceSegment);
      }
      next = seg.end;
    }
    EXPECT_EQ(next, len);
    EXPECT_EQ(kernels::reduce_lanes(len), len > kReduceSegment ? kernels::kReduceLanes : kernels::reduce_lanes(len));
  }
  // The same row gives the same bits whatever else is reduced with it: alone, among rows,
  // as a column among columns.
  const int64_t len = 3 * kReduceSegment + 17;
  Tensor rows = random_tensor({3, len}, 19);
  const std::vector<float> together = ops::sum(rows, 1).to_vector<float>();
  const std::vector<float> as_columns = ops::sum(ops::permute(rows, {1, 0}), 0).to_vector<float>();
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(ops::sum_all(rows.narrow(r, 1)).to_vector<float>()[0], together[size_t(r)]);
    EXPECT_EQ(as_columns[size_t(r)], together[size_t(r)]);
  }
}

// Random values with a few rows of -0 (a sum must still start from the identity +0, as the
// lanes do) and a few NaNs.
Tensor awkward_tensor(const Shape& shape, uint64_t seed) {
  std::vector<float> v = random_tensor(shape, seed).to_vector<float>();
  for (size_t i = 0; i < v.size() && i < 40; ++i) v[i] = -0.0f;
  for (size_t i = 97; i < v.size(); i += 997) v[i] = std::nanf("");
  return Tensor::from_vector(v, shape);
}

TEST(Reduce, EveryCpuLoopAddsInTheOrderOfTheBodies) {
  // Exact short rows (2, 4, 16), other short rows, a single element, long rows, columns
  // short and long, few columns, a whole-tensor reduction, no outputs and empty rows, rows
  // and columns of one segment exactly and of several (the last one partial); on 1, 2 and 3
  // threads, which moves the split of the work. The CUDA backend runs the bodies as
  // they are: the CPU must give their bits.
  const struct {
    Shape shape;
    int dim;
  } geometries[] = {{{999, 4}, 1},     {{999, 2}, 1},  {{999, 16}, 1},    {{999, 5}, 1},    {{999, 1}, 1},
                    {{300, 17}, 1},    {{3, 600}, 1},  {{7, 300, 5}, 1},  {{5, 3, 33}, 1},  {{1, 5000, 3}, 1},
                    {{2, 2000, 1}, 1}, {{70000}, 0},   {{0, 4}, 1},       {{3, 0}, 1},      {{2, 4096}, 1},
                    {{2, 4097}, 1},    {{3, 8209}, 1}, {{2, 8192, 5}, 1}, {{4, 9000, 1}, 1}};
  const int saved = omp_get_max_threads();
  for (const auto& g : geometries)
    // Also without NaNs: a row that holds one is NaN in any order.
    for (const Tensor& x : {awkward_tensor(g.shape, 18), random_tensor(g.shape, 18)})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max}) {
        if (op == ReduceOp::max && g.shape[g.dim] == 0) continue;  // no maximum of nothing
        const Tensor expected = reduce_in_stated_order(op, x, g.dim);
        for (int threads : {1, 2, 3}) {
          SCOPED_TRACE(g.shape.str() + " dim " + std::to_string(g.dim) + " op " + std::to_string(int(op)) +
                       " threads " + std::to_string(threads));
          omp_set_num_threads(threads);
          EXPECT_TRUE(test::tensors_equal(ops::reduce(op, x, g.dim).reshape(expected.shape()), expected));
        }
      }
  omp_set_num_threads(saved);
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
