// Every op of kernels/elementwise.h, reduce.h, random.h and gemm.h on cuda:0 against the
// CPU backend, on random inputs (label gpu: skipped without a CUDA device).
//
// Ops whose element body is a single correctly rounded float operation (fill, cast, add,
// mul, scale, ReLU) and the sum and max reductions (same lane and tree order on both
// backends) must agree bit for bit; the others (axpy and sum of squares with FMA
// contraction, Philox normals through logf/cosf, cuBLAS) within tolerances.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {
namespace {

using GpuOps = GpuTest;
using kernels::ReduceOp;

// Large enough that the grid-stride loops wrap (more elements than threads in the grid).
constexpr int64_t kLarge = (int64_t(1) << 21) + 7;

// ---- element-wise ----------------------------------------------------------------------

TEST_F(GpuOps, FillEveryDtype) {
  for (DType dt : kAllTypes) {
    SCOPED_TRACE(dtype_name(dt));
    for (int64_t n : {int64_t(1), int64_t(1001), kLarge}) {
      Tensor c = Tensor::empty({n}, dt), g = Tensor::empty({n}, dt, gpu());
      ops::fill(c, -2.75);
      ops::fill(g, -2.75);
      EXPECT_TRUE(tensors_equal(g, c)) << "n = " << n;
    }
  }
}

TEST_F(GpuOps, CastEveryPairOfDtypes) {
  for (DType from : kAllTypes)
    for (DType to : kAllTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      Tensor x = random_tensor({7, 11, 13}, 3, -300.0f, 300.0f, from);
      EXPECT_TRUE(tensors_equal(ops::cast(on_gpu(x), to), ops::cast(x, to)));
    }
}

TEST_F(GpuOps, UnaryAndBinaryOpsMatchCpuBitwise) {
  for (DType dt : kFloatingTypes)
    for (int64_t n : {int64_t(3 * 5 * 7), kLarge}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n = " + std::to_string(n));
      Tensor a = random_tensor({n}, 1, -2, 2, dt), b = random_tensor({n}, 2, -2, 2, dt);
      Tensor ga = on_gpu(a), gb = on_gpu(b);
      Tensor c = Tensor::empty({n}, dt), g = Tensor::empty({n}, dt, gpu());

      ops::add(a, b, c);
      ops::add(ga, gb, g);
      EXPECT_TRUE(tensors_equal(g, c)) << "add";
      ops::mul(a, b, c);
      ops::mul(ga, gb, g);
      EXPECT_TRUE(tensors_equal(g, c)) << "mul";
      ops::relu_forward(a, c);
      ops::relu_forward(ga, g);
      EXPECT_TRUE(tensors_equal(g, c)) << "relu_forward";
      ops::relu_backward(a, b, c);
      ops::relu_backward(ga, gb, g);
      EXPECT_TRUE(tensors_equal(g, c)) << "relu_backward";
      Tensor s = a.clone(), gs = ga.clone();
      ops::scale(s, -0.37f);
      ops::scale(gs, -0.37f);
      EXPECT_TRUE(tensors_equal(gs, s)) << "scale";
    }
}

TEST_F(GpuOps, AxpyMatchesCpu) {
  for (DType dt : kFloatingTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor({kLarge}, 4, -1, 1, dt), y = random_tensor({kLarge}, 5, -1, 1, dt);
    Tensor gy = on_gpu(y);
    ops::axpy(0.73f, x, y);
    ops::axpy(0.73f, on_gpu(x), gy);
    EXPECT_TRUE(tensors_close(gy, y, tolerance_for(dt, {1e-6, 1e-6})));
  }
}

TEST_F(GpuOps, InPlaceOutputsAliasingInputs) {
  Tensor a = random_tensor({4, 33}, 6), b = random_tensor({4, 33}, 7);
  Tensor ga = on_gpu(a), gb = on_gpu(b);
  ops::add(a, b, a);
  ops::add(ga, gb, ga);
  ops::relu_forward(a, a);
  ops::relu_forward(ga, ga);
  EXPECT_TRUE(tensors_equal(ga, a));
}

TEST_F(GpuOps, EmptyTensorsLaunchNothing) {
  for (DType dt : kFloatingTypes) {
    Tensor e = Tensor::empty({0, 4}, dt, gpu()), f = Tensor::empty({0, 4}, dt, gpu());
    ops::fill(e, 1.0);
    ops::add(e, e, f);
    ops::scale(f, 2.0f);
    ops::cast(e, DType::f32);
    ops::uniform_(e, 0, 1, {});
    EXPECT_EQ(ops::sum(e, 1).numel(), 0);
    EXPECT_TRUE(tensors_equal(ops::sum(e, 0), ops::sum(e.to(Device::cpu()), 0)));  // zeros
  }
}

// ---- reductions ------------------------------------------------------------------------

struct ReduceCase {
  Shape shape;
  int dim;
};

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {
      {{3, 5, 7, 2}, 0}, {{3, 5, 7, 2}, 1}, {{3, 5, 7, 2}, 2}, {{3, 5, 7, 2}, 3},
      {{2, 3001}, 1},    // long rows: every lane folds several elements
      {{3001, 2}, 0},    // long strided columns
      {{64, 9, 100}, 1},  // more outputs than blocks: the grid loops over outputs
      {{kLarge}, 0},     // one output from 2 M elements
  };
  return cases;
}

TEST_F(GpuOps, SumAndMaxMatchCpuBitwise) {
  for (DType dt : kFloatingTypes)
    for (const ReduceCase& rc : reduce_cases())
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + rc.shape.str() + " dim " + std::to_string(rc.dim) +
                     " op " + std::to_string(int(op)));
        Tensor x = random_tensor(rc.shape, 8, -1, 1, dt);
        EXPECT_TRUE(tensors_equal(ops::reduce(op, on_gpu(x), rc.dim), ops::reduce(op, x, rc.dim)));
      }
}

TEST_F(GpuOps, SumSquaresMatchesCpu) {
  for (DType dt : kFloatingTypes)
    for (const ReduceCase& rc : reduce_cases()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + rc.shape.str() + " dim " + std::to_string(rc.dim));
      Tensor x = random_tensor(rc.shape, 9, -1, 1, dt);
      EXPECT_TRUE(tensors_close(ops::sum_squares(on_gpu(x), rc.dim), ops::sum_squares(x, rc.dim),
                                tolerance_for(dt, {1e-5, 1e-5})));
    }
}

TEST_F(GpuOps, KeepdimAndWholeTensorReductions) {
  Tensor x = random_tensor({4, 6, 5}, 10);
  Tensor gx = on_gpu(x);
  EXPECT_TRUE(tensors_equal(ops::sum(gx, 1, true), ops::sum(x, 1, true)));
  EXPECT_TRUE(tensors_equal(ops::sum_all(gx), ops::sum_all(x)));
  EXPECT_TRUE(tensors_equal(ops::max_all(gx), ops::max_all(x)));
  EXPECT_TRUE(tensors_close(ops::sum_squares_all(gx), ops::sum_squares_all(x), {1e-5, 1e-5}));
}

TEST_F(GpuOps, MaxPropagatesNaN) {
  std::vector<float> v(600, 1.0f);
  v[417] = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector(v, {2, 300});
  EXPECT_TRUE(tensors_equal(ops::max(on_gpu(x), 1), ops::max(x, 1)));
}

TEST_F(GpuOps, ReductionsAreDeterministic) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::sum_squares, ReduceOp::max}) {
    Tensor gx = on_gpu(random_tensor({16, 4099, 3}, 11));
    EXPECT_TRUE(tensors_equal(ops::reduce(op, gx, 1), ops::reduce(op, gx, 1)));
    Tensor gy = on_gpu(random_tensor({kLarge}, 12));
    EXPECT_TRUE(tensors_equal(ops::reduce(op, gy, 0), ops::reduce(op, gy, 0)));
  }
}

// ---- random ----------------------------------------------------------------------------

TEST_F(GpuOps, RandomDrawsMatchCpu) {
  const ops::RandomKey key{1234, philox_stream_id("layer1.0.conv1.weight"), 1000};
  for (DType dt : kFloatingTypes)
    for (int64_t n : {int64_t(17), kLarge}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n = " + std::to_string(n));
      Tensor c = Tensor::empty({n}, dt), g = Tensor::empty({n}, dt, gpu());
      ops::uniform_(c, -0.5f, 2.0f, key);
      ops::uniform_(g, -0.5f, 2.0f, key);
      EXPECT_TRUE(tensors_close(g, c, tolerance_for(dt, {1e-6, 1e-6}))) << "uniform_";
      ops::normal_(c, 0.25f, 1.5f, key);
      ops::normal_(g, 0.25f, 1.5f, key);
      EXPECT_TRUE(tensors_close(g, c, tolerance_for(dt, {1e-5, 1e-5}))) << "normal_";
      ops::kaiming_normal_(c, 27, key);
      ops::kaiming_normal_(g, 27, key);
      EXPECT_TRUE(tensors_close(g, c, tolerance_for(dt, {1e-5, 1e-5}))) << "kaiming_normal_";
      ops::kaiming_uniform_(c, 27, key);
      ops::kaiming_uniform_(g, 27, key);
      EXPECT_TRUE(tensors_close(g, c, tolerance_for(dt, {1e-6, 1e-6}))) << "kaiming_uniform_";
      ops::xavier_uniform_(c, 27, 64, key);
      ops::xavier_uniform_(g, 27, 64, key);
      EXPECT_TRUE(tensors_close(g, c, tolerance_for(dt, {1e-6, 1e-6}))) << "xavier_uniform_";
    }
}

TEST_F(GpuOps, RandomSliceDrawsTheFullTensorsValues) {
  // Rows [3, 7) of a [10, 33] parameter, drawn alone with offset = 3 * 33.
  const ops::RandomKey key{7, 99, 0};
  Tensor full = Tensor::empty({10, 33}, DType::f32, gpu());
  ops::normal_(full, 0, 1, key);
  Tensor part = Tensor::empty({4, 33}, DType::f32, gpu());
  ops::normal_(part, 0, 1, {key.seed, key.stream, 3 * 33});
  EXPECT_TRUE(tensors_equal(part, full.narrow(3, 4).clone()));
}

// ---- GEMM ------------------------------------------------------------------------------

// A [m, k] (or [k, m] transposed) with an optional batch dimension (0: 2-D, shared).
Shape operand_shape(int64_t batch, int64_t rows, int64_t cols, bool transposed) {
  if (transposed) std::swap(rows, cols);
  if (batch == 0) return {rows, cols};
  return {batch, rows, cols};
}

struct GemmCase {
  int64_t batch_a, batch_b, batch_c;  // 0: 2-D operand (shared by every batch entry)
  int64_t m, n, k;
};

// Runs the case on both backends (C starts random, or NaN when beta == 0 to show it is
// never read) and compares.
void expect_gemm_matches(const GemmCase& g, DType dt, const ops::GemmOptions& o, Tolerance tol) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " m " << g.m << " n " << g.n << " k " << g.k
                                    << " batch " << g.batch_a << "/" << g.batch_b << "/" << g.batch_c
                                    << " ta " << o.transpose_a << " tb " << o.transpose_b << " alpha "
                                    << o.alpha << " beta " << o.beta << " tf32 "
                                    << (o.math == ops::MathMode::tf32));
  Tensor a = random_tensor(operand_shape(g.batch_a, g.m, g.k, o.transpose_a), 21, -1, 1, dt);
  Tensor b = random_tensor(operand_shape(g.batch_b, g.k, g.n, o.transpose_b), 22, -1, 1, dt);
  Tensor c = random_tensor(operand_shape(g.batch_c, g.m, g.n, false), 23, -1, 1, dt);
  if (o.beta == 0.0f) ops::fill(c, std::nan(""));
  Tensor gc = on_gpu(c);
  const bool batched = g.batch_c != 0;
  if (batched) {
    ops::gemm_batched(a, b, c, o);
    ops::gemm_batched(on_gpu(a), on_gpu(b), gc, o);
  } else {
    ops::gemm(a, b, c, o);
    ops::gemm(on_gpu(a), on_gpu(b), gc, o);
  }
  EXPECT_TRUE(tensors_close(gc, c, tol));
}

ops::GemmOptions options(bool ta, bool tb, float alpha, float beta,
                         ops::MathMode math = ops::MathMode::fp32) {
  ops::GemmOptions o;
  o.transpose_a = ta;
  o.transpose_b = tb;
  o.alpha = alpha;
  o.beta = beta;
  o.math = math;
  return o;
}

TEST_F(GpuOps, GemmEveryTransposeAndDtype) {
  const GemmCase g{0, 0, 0, 37, 53, 29};
  for (DType dt : kFloatingTypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f})
          expect_gemm_matches(g, dt, options(ta, tb, 1.5f, beta), tolerance_for(dt, {1e-4, 1e-4}));
}

TEST_F(GpuOps, GemmTf32IsCloseButLooser) {
  const GemmCase g{0, 0, 0, 37, 53, 29};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      expect_gemm_matches(g, DType::f32, options(ta, tb, 1.0f, 0.5f, ops::MathMode::tf32), {2e-2, 1e-2});
}

TEST_F(GpuOps, GemmFp32IsNotSilentlyTf32) {
  // k = 1024: TF32's 10-bit mantissa gives errors near 1e-3 here, fp32 near 1e-5.
  const GemmCase g{0, 0, 0, 64, 96, 1024};
  expect_gemm_matches(g, DType::f32, options(false, false, 1.0f, 0.0f), {2e-4, 1e-5});
  expect_gemm_matches(g, DType::f32, options(true, true, 1.0f, 0.0f), {2e-4, 1e-5});
}

TEST_F(GpuOps, GemmBatchedAndShared) {
  const std::vector<GemmCase> cases = {
      {3, 3, 3, 19, 23, 17},  // every operand batched
      {3, 0, 3, 19, 23, 17},  // B shared (stride 0)
      {0, 3, 3, 19, 23, 17},  // A shared
      {0, 0, 2, 8, 8, 8},     // both shared
  };
  for (const GemmCase& g : cases)
    for (DType dt : kFloatingTypes)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          expect_gemm_matches(g, dt, options(ta, tb, 0.75f, 0.25f), tolerance_for(dt, {1e-4, 1e-4}));
}

TEST_F(GpuOps, GemmLarger) {
  expect_gemm_matches({0, 0, 0, 256, 384, 512}, DType::f32, options(false, true, 1.0f, 0.0f),
                      {2e-4, 1e-5});
  expect_gemm_matches({0, 0, 0, 256, 384, 512}, DType::bf16, options(true, false, 1.0f, 1.0f),
                      tolerance_for(DType::bf16, {1e-4, 1e-4}));
}

TEST_F(GpuOps, GemmEmptyInnerDimensionScalesC) {
  for (DType dt : kFloatingTypes)
    for (float beta : {0.0f, 1.0f, 2.0f}) {
      expect_gemm_matches({0, 0, 0, 5, 6, 0}, dt, options(false, false, 1.0f, beta), {0, 0});
      expect_gemm_matches({2, 2, 2, 5, 6, 0}, dt, options(true, true, 1.0f, beta), {0, 0});
    }
  // beta == 0 overwrites a NaN-filled C with zeros.
  Tensor a = Tensor::empty({5, 0}, DType::f32, gpu()), b = Tensor::empty({0, 6}, DType::f32, gpu());
  Tensor c = Tensor::empty({5, 6}, DType::f32, gpu());
  ops::fill(c, std::nan(""));
  ops::gemm(a, b, c);
  EXPECT_TRUE(tensors_equal(c, Tensor::zeros({5, 6})));
}

// ---- views with a storage offset ----------------------------------------------------
// narrow() views start inside their storage (a non-zero offset, often not 16-byte aligned).
// Each op runs on the same views of the same buffers on both backends; whole buffers are
// compared, so elements outside the written view must be untouched too.

TEST_F(GpuOps, AddOnNarrowedViews) {
  for (DType dt : kFloatingTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = random_tensor({10, 33}, 41, -2, 2, dt), b = random_tensor({10, 33}, 42, -2, 2, dt);
    Tensor out = random_tensor({10, 33}, 43, -2, 2, dt);
    Tensor ga = on_gpu(a), gb = on_gpu(b), gout = on_gpu(out);
    Tensor cv = out.narrow(2, 5), gv = gout.narrow(2, 5);
    ops::add(a.narrow(3, 5), b.narrow(1, 5), cv);
    ops::add(ga.narrow(3, 5), gb.narrow(1, 5), gv);
    EXPECT_TRUE(tensors_equal(gout, out));
  }
}

TEST_F(GpuOps, AxpyOnNarrowedViews) {
  for (DType dt : kFloatingTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor({9, 1001}, 44, -1, 1, dt), y = random_tensor({9, 1001}, 45, -1, 1, dt);
    Tensor gx = on_gpu(x), gy = on_gpu(y);
    Tensor yv = y.narrow(4, 3), gyv = gy.narrow(4, 3);
    ops::axpy(-1.25f, x.narrow(1, 3), yv);
    ops::axpy(-1.25f, gx.narrow(1, 3), gyv);
    EXPECT_TRUE(tensors_close(gy, y, tolerance_for(dt, {1e-6, 1e-6})));
  }
}

TEST_F(GpuOps, GemmOnNarrowedViews) {
  // Rows of odd length: the views' first elements are misaligned for vector loads.
  const int64_t m = 19, n = 23, k = 29;
  for (DType dt : kFloatingTypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " ta " << ta << " tb " << tb);
        // A is [m, k] ([k, m] when transposed), B is [k, n] ([n, k]), C is [m, n]: each a
        // block of rows inside a taller buffer.
        Tensor a = random_tensor({50, ta ? m : k}, 46, -1, 1, dt);
        Tensor b = random_tensor({60, tb ? k : n}, 47, -1, 1, dt);
        Tensor c = random_tensor({40, n}, 48, -1, 1, dt);
        Tensor ga = on_gpu(a), gb = on_gpu(b), gc = on_gpu(c);
        const int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
        Tensor cv = c.narrow(7, m), gcv = gc.narrow(7, m);
        const ops::GemmOptions o = options(ta, tb, 1.5f, 0.5f);
        ops::gemm(a.narrow(3, a_rows), b.narrow(5, b_rows), cv, o);
        ops::gemm(ga.narrow(3, a_rows), gb.narrow(5, b_rows), gcv, o);
        EXPECT_TRUE(tensors_close(gc, c, tolerance_for(dt, {1e-4, 1e-4})));
      }
}

TEST_F(GpuOps, GemmBatchedOnNarrowedBatches) {
  for (DType dt : kFloatingTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = random_tensor({5, 13, 17}, 49, -1, 1, dt);
    Tensor b = random_tensor({6, 17, 11}, 50, -1, 1, dt);
    Tensor c = random_tensor({7, 13, 11}, 51, -1, 1, dt);
    Tensor gc = on_gpu(c);
    Tensor cv = c.narrow(3, 3), gcv = gc.narrow(3, 3);
    const ops::GemmOptions o = options(false, false, 1.0f, 1.0f);
    ops::gemm_batched(a.narrow(1, 3), b.narrow(2, 3), cv, o);
    ops::gemm_batched(on_gpu(a).narrow(1, 3), on_gpu(b).narrow(2, 3), gcv, o);
    EXPECT_TRUE(tensors_close(gc, c, tolerance_for(dt, {1e-4, 1e-4})));
  }
}

TEST_F(GpuOps, UniformOnNarrowedViews) {
  const ops::RandomKey key{99, philox_stream_id("fc.weight"), 5 * 37};
  for (DType dt : kFloatingTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor c = Tensor::empty({12, 37}, dt), g = Tensor::empty({12, 37}, dt, gpu());
    ops::fill(c, -9.0);  // the rows outside the view keep this value
    ops::fill(g, -9.0);
    Tensor cv = c.narrow(5, 4), gv = g.narrow(5, 4);
    ops::uniform_(cv, -0.5f, 0.5f, key);
    ops::uniform_(gv, -0.5f, 0.5f, key);
    EXPECT_TRUE(tensors_close(g, c, tolerance_for(dt, {1e-6, 1e-6})));
  }
}

}  // namespace
}  // namespace gridnn::test
