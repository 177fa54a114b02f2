#include "kernels/gemm.h"

#include <limits>

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

struct MatrixView {
  int64_t batch;  // 0: a single matrix shared by every batch entry
  int64_t rows, cols;
};

MatrixView view_of(const char* name, const Tensor& t) {
  GRIDNN_REQUIRE(t.rank() == 2 || t.rank() == 3, "gemm: ", name, " must be 2-D or 3-D, got ", t.str());
  if (t.rank() == 2) return {0, t.size(0), t.size(1)};
  return {t.size(0), t.size(1), t.size(2)};
}

void run(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& o, bool batched) {
  const char* op = batched ? "gemm_batched" : "gemm";
  expect_defined(op, "a", a);
  expect_defined(op, "b", b);
  expect_defined(op, "c", c);
  expect_same_device(op, a, b);
  expect_same_device(op, a, c);
  expect_same_dtype(op, a, b);
  expect_same_dtype(op, a, c);
  expect_floating(op, a);
  expect_disjoint(op, a, c);
  expect_disjoint(op, b, c);
  MatrixView va = view_of("A", a), vb = view_of("B", b), vc = view_of("C", c);
  if (!batched) {
    GRIDNN_REQUIRE(a.rank() == 2 && b.rank() == 2 && c.rank() == 2,
                   "gemm: A, B and C must be 2-D (use gemm_batched for 3-D); got ", a.str(), ", ", b.str(), ", ",
                   c.str());
  } else {
    GRIDNN_REQUIRE(c.rank() == 3, "gemm_batched: C must be 3-D [batch, m, n], got ", c.str());
  }
  const int64_t m = o.transpose_a ? va.cols : va.rows;
  const int64_t k = o.transpose_a ? va.rows : va.cols;
  const int64_t kb = o.transpose_b ? vb.cols : vb.rows;
  const int64_t n = o.transpose_b ? vb.rows : vb.cols;
  GRIDNN_REQUIRE(k == kb, op, ": inner dimensions differ: op(A) is [", m, ", ", k, "] and op(B) is [", kb, ", ", n,
                 "] (A ", a.str(), ", B ", b.str(), ")");
  GRIDNN_REQUIRE(vc.rows == m && vc.cols == n, op, ": C ", c.str(), " should be [", m, ", ", n, "] for A ", a.str(),
                 " and B ", b.str());
  const int64_t batch = batched ? vc.batch : 1;
  GRIDNN_REQUIRE(va.batch == 0 || va.batch == batch, op, ": A has batch ", va.batch, " but C has ", batch);
  GRIDNN_REQUIRE(vb.batch == 0 || vb.batch == batch, op, ": B has batch ", vb.batch, " but C has ", batch);
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  GRIDNN_REQUIRE(m <= kIntMax && n <= kIntMax && k <= kIntMax && batch <= kIntMax, op,
                 ": matrix dimensions must fit in 32 bits for BLAS");

  GemmProblem p;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_a = o.transpose_a;
  p.transpose_b = o.transpose_b;
  p.lda = va.cols;
  p.ldb = vb.cols;
  p.ldc = n;
  p.stride_a = va.batch ? va.rows * va.cols : 0;
  p.stride_b = vb.batch ? vb.rows * vb.cols : 0;
  p.stride_c = m * n;
  p.alpha = o.alpha;
  p.beta = o.beta;
  p.math = o.math;
  if (m == 0 || n == 0 || batch == 0) return;
  GRIDNN_BACKEND_CALL(a.device(), gemm, p, a, b, c);
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& o) { run(a, b, c, o, false); }
void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& o) { run(a, b, c, o, true); }

}  // namespace gridnn::ops
