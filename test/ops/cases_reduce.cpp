// kernels/reduce.h: sum, sum of squares and max along every dimension of an odd shape,
// along long rows and long strided columns, with more outputs than CUDA blocks and over
// 2 M elements; keepdim and whole-tensor reductions, NaN propagation, 16-bit inputs
// accumulating in f32. Few outputs with long rows and columns cut into several segments
// (kernels/reduce_bodies.h: one segment exactly, one element more, the last segment
// partial), so both passes and the fold run. Every op adds in the same segment, lane, tree
// and fold order on both backends, neither contracting into FMAs: bitwise.
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "test/ops/harness.h"
#include "test/support/reference.h"

namespace gridnn::test {
namespace {

using ops::ReduceOp;

const char* op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::sum_squares ? "sum_squares" : "max";
}

struct Geometry {
  Shape shape;
  int dim;
};

OpCase reduce_case(ReduceOp op, const Geometry& g, DType dt, bool keepdim = false) {
  OpCase c;
  c.op = op_name(op);
  c.params = shape_name(g.shape) + " dim " + std::to_string(g.dim) + (keepdim ? " keepdim " : " ") + dtype_name(dt);
  const std::string key = c.op + c.params;
  const Shape shape = g.shape;
  const int dim = g.dim;
  c.make_inputs = [=] { return Tensors{case_input(key, 0, shape, -1.0f, 1.0f, dt)}; };
  c.run = [=](const Tensors& in) { return Tensors{ops::reduce(op, in[0], dim, keepdim)}; };
  c.reference = [=](const Tensors& in) {
    Doubles r = reference_reduce(op, in[0], dim);
    if (dt == DType::f16)  // beyond f16's range the stored result is infinite (2 M squares)
      for (double& v : r)
        if (std::fabs(v) >= 65520.0) v = std::copysign(INFINITY, v);
    return std::vector<Doubles>{r};
  };
  // Rounding of a float accumulation grows with the length reduced.
  const double len = double(shape[dim]);
  c.ref_tol = op == ReduceOp::max ? Tolerance{0, 0} : stored_tolerance(dt, {1e-6 * (1 + len), 1e-6});
  c.bitwise = true;
  c.backend_tol = stored_tolerance(dt, {1e-5, 1e-5});
  return c;
}

// The whole tensor reduced to one element ([1]).
OpCase reduce_all_case(ReduceOp op, const Shape& shape, DType dt) {
  OpCase c = reduce_case(op, {Shape{shape.numel()}, 0}, dt);
  c.op = std::string(op_name(op)) + "_all";
  c.params = shape_name(shape) + " " + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{case_input(key, 0, shape, -1.0f, 1.0f, dt)}; };
  c.run = [op](const Tensors& in) {
    return Tensors{op == ReduceOp::sum   ? ops::sum_all(in[0])
                   : op == ReduceOp::max ? ops::max_all(in[0])
                                         : ops::sum_squares_all(in[0])};
  };
  c.reference = [op](const Tensors& in) {
    return std::vector<Doubles>{reference_reduce(op, in[0].reshape({in[0].numel()}), 0)};
  };
  return c;
}

}  // namespace

void add_reduce_cases(OpCases& cases) {
  const std::vector<Geometry> geometries = {
      {{3, 5, 7, 2}, 0},
      {{3, 5, 7, 2}, 1},
      {{3, 5, 7, 2}, 2},
      {{3, 5, 7, 2}, 3},
      {{2, 3001}, 1},                 // long rows: every lane folds several elements
      {{3001, 2}, 0},                 // long strided columns
      {{64, 9, 100}, 1},              // more outputs than CUDA blocks: the grid loops over outputs
      {{(int64_t(1) << 21) + 7}, 0},  // one output from 2 M elements
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Geometry& g : geometries)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max}) cases.push_back(reduce_case(op, g, dt));
  cases.push_back(reduce_case(ReduceOp::sum, {{4, 6, 5}, 1}, DType::f32, /*keepdim=*/true));
  // Empty inputs: summing zero elements gives zeros; no output launches nothing.
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    cases.push_back(reduce_case(ReduceOp::sum, {{0, 4}, 0}, dt));
    cases.push_back(reduce_case(ReduceOp::sum, {{0, 4}, 1}, dt));
  }
  cases.push_back(reduce_case(ReduceOp::max, {{16, 4099, 3}, 1}, DType::f32));
  // Few outputs, long rows and columns: kReduceSegment (4096) elements exactly (one segment),
  // one more (a segment of one element after it), several segments with a partial last one,
  // few columns of several segments, four rows of eight whole segments; and a whole
  // [8, 4, 16, 16, 16] activation (32 segments, one output).
  const std::vector<Geometry> segmented = {
      {{3, 4096}, 1},    {{3, 4097}, 1},    {{2, 3 * 4096 + 17}, 1}, {{12289}, 0},
      {{2, 9000, 3}, 1}, {{1, 8193, 2}, 1}, {{4, 8 * 4096}, 1},
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (const Geometry& g : segmented)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max}) cases.push_back(reduce_case(op, g, dt));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max})
    cases.push_back(reduce_all_case(op, {8, 4, 16, 16, 16}, DType::f32));
  // Empty rows: sums of nothing are zeros, with and without columns.
  cases.push_back(reduce_case(ReduceOp::sum, {{3, 0, 5}, 1}, DType::f32));
  cases.push_back(reduce_case(ReduceOp::sum_squares, {{7, 0}, 1}, DType::f32));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max})
    cases.push_back(reduce_all_case(op, {4, 6, 5}, DType::f32));

  // 4096 ones in bf16: an accumulator in bf16 would stall at 256; f32 gives 4096 exactly.
  OpCase ones = reduce_all_case(ReduceOp::sum, {4096}, DType::bf16);
  ones.params = "4096 ones bf16";
  ones.make_inputs = [] {
    Tensor t = Tensor::empty({4096}, DType::bf16);
    ops::fill(t, 1.0);
    return Tensors{t};
  };
  ones.ref_tol = {0, 0};
  cases.push_back(ones);

  // A NaN anywhere in a row makes its max NaN.
  OpCase nan = reduce_case(ReduceOp::max, {{2, 300}, 1}, DType::f32);
  nan.params += " with NaN";
  nan.make_inputs = [] {
    std::vector<float> v(600, 1.0f);
    v[417] = std::nanf("");
    v[3] = 2.0f;
    return Tensors{Tensor::from_vector(v, {2, 300})};
  };
  cases.push_back(nan);
}

}  // namespace gridnn::test
