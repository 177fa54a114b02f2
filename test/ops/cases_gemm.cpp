// kernels/gemm.h: C = alpha op(A) op(B) + beta C for every transpose and dtype, batched with
// each operand batched or shared, an empty inner dimension, beta = 0 overwriting a NaN C,
// views inside larger buffers, sizes where TF32 would show (fp32 must not silently be TF32),
// and the tf32/bf16 math modes against a reference that rounds the operands itself.
// The CPU sgemm and cuBLAS sum in different orders: the backends agree within a tolerance.
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "test/ops/harness.h"
#include "test/support/reference.h"

namespace gridnn::test {
namespace {

struct Sizes {
  int64_t batch_a, batch_b, batch_c;  // 0: a 2-D operand (shared by every batch entry)
  int64_t m, n, k;
};

Shape operand(int64_t batch, int64_t rows, int64_t cols, bool transposed) {
  if (transposed) std::swap(rows, cols);
  return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols};
}

// x rounded to `bits` significant bits, ties to even (TF32: 11, bf16: 8), in double: an
// independent statement of kernels/math_mode.h's rounding.
double round_to_bits(double x, int bits) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

Doubles rounded(Doubles v, ops::MathMode math) {
  if (math == ops::MathMode::fp32) return v;
  for (double& x : v) x = round_to_bits(x, math == ops::MathMode::tf32 ? 11 : 8);
  return v;
}

Doubles part(const Doubles& v, int64_t batch, int64_t q, int64_t size) {
  if (batch == 0) return v;
  return Doubles(v.begin() + q * size, v.begin() + (q + 1) * size);
}

OpCase gemm_case(const Sizes& s, DType dt, const ops::GemmOptions& o, const std::string& what = "") {
  OpCase c;
  const bool batched = s.batch_c != 0;
  c.op = batched ? "gemm_batched" : "gemm";
  c.params =
      (batched ? std::to_string(s.batch_a) + "/" + std::to_string(s.batch_b) + "/" + std::to_string(s.batch_c) + " "
               : "") +
      std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + (o.transpose_a ? " ta" : "") +
      (o.transpose_b ? " tb" : "") + " alpha " + std::to_string(o.alpha).substr(0, 4) + " beta " +
      std::to_string(o.beta).substr(0, 4) + " " + str(o.math) + " " + dtype_name(dt) + what;
  const std::string key = c.op + c.params;
  const Shape sa = operand(s.batch_a, s.m, s.k, o.transpose_a), sb = operand(s.batch_b, s.k, s.n, o.transpose_b),
              sc = operand(s.batch_c, s.m, s.n, false);
  c.make_inputs = [=] {
    Tensor cin = case_input(key, 2, sc, -1.0f, 1.0f, dt);
    if (o.beta == 0.0f) ops::fill(cin, std::nan(""));  // never read
    return Tensors{case_input(key, 0, sa, -1.0f, 1.0f, dt), case_input(key, 1, sb, -1.0f, 1.0f, dt), cin};
  };
  c.run = [=](const Tensors& in) {
    Tensor out = in[2].clone();
    if (batched)
      ops::gemm_batched(in[0], in[1], out, o);
    else
      ops::gemm(in[0], in[1], out, o);
    return Tensors{out};
  };
  c.reference = [=](const Tensors& in) {
    const Doubles a = rounded(values(in[0]), o.math), b = rounded(values(in[1]), o.math), c0 = values(in[2]);
    const int64_t batches = batched ? s.batch_c : 1;
    Doubles out;
    for (int64_t q = 0; q < batches; ++q) {
      const Doubles r = reference_gemm(part(a, s.batch_a, q, s.m * s.k), part(b, s.batch_b, q, s.k * s.n),
                                       part(c0, s.batch_c, q, s.m * s.n), s.m, s.n, s.k, o);
      out.insert(out.end(), r.begin(), r.end());
    }
    return std::vector<Doubles>{out};
  };
  // f32: accumulation error grows like sqrt(k); 16-bit: one rounding of C (|C| ~ sqrt(k/9)).
  const double k = double(std::max<int64_t>(s.k, 1));
  c.ref_tol = stored_tolerance(dt, {2e-7 * std::sqrt(k) * 4 + 1e-6, 1e-5});
  c.backend_tol = stored_tolerance(dt, {2e-7 * std::sqrt(k) * 4 + 1e-4, 1e-4});
  if (o.math == ops::MathMode::tf32) c.backend_tol = {2e-2, 1e-2};
  if (s.k == 0) c.backend_tol = {0, 0};
  return c;
}

ops::GemmOptions options(bool ta, bool tb, float alpha, float beta, ops::MathMode math = ops::MathMode::fp32) {
  ops::GemmOptions o;
  o.transpose_a = ta;
  o.transpose_b = tb;
  o.alpha = alpha;
  o.beta = beta;
  o.math = math;
  return o;
}

// dL/dA, dL/dB and dL/dC of C' = alpha op(A) op(B) + beta C, from dy = dL/dC'.
Tensors gemm_backward(const Tensors& in, const Tensor& dy, const ops::GemmOptions& o) {
  const Tensor &a = in[0], &b = in[1];
  Tensor da = Tensor::empty(a.shape(), a.dtype(), a.device()), db = Tensor::empty(b.shape(), b.dtype(), b.device());
  if (o.transpose_a)
    ops::gemm(b, dy, da, options(o.transpose_b, true, o.alpha, 0));  // (dy op(B)^T)^T = op(B) dy^T
  else
    ops::gemm(dy, b, da, options(false, !o.transpose_b, o.alpha, 0));
  if (o.transpose_b)
    ops::gemm(dy, a, db, options(true, o.transpose_a, o.alpha, 0));  // (op(A)^T dy)^T = dy^T op(A)
  else
    ops::gemm(a, dy, db, options(!o.transpose_a, false, o.alpha, 0));
  Tensor dc = dy.clone();
  ops::scale(dc, o.beta);
  return {da, db, dc};
}

}  // namespace

void add_gemm_cases(OpCases& cases) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          OpCase c = gemm_case({0, 0, 0, 37, 53, 29}, dt, options(ta, tb, 1.5f, beta));
          cases.push_back(c);
        }
  // Gradients through every transpose (small f32 operands).
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const ops::GemmOptions o = options(ta, tb, 1.5f, -0.5f);
      OpCase c = gemm_case({0, 0, 0, 7, 5, 9}, DType::f32, o);
      c.backward = [o](const Tensors& in, const Tensor& dy) { return gemm_backward(in, dy, o); };
      c.grad_inputs = {0, 1, 2};
      cases.push_back(c);
    }
  for (const Sizes& s : std::vector<Sizes>{{3, 3, 3, 19, 23, 17},  // every operand batched
                                           {3, 0, 3, 19, 23, 17},  // B shared (stride 0)
                                           {0, 3, 3, 19, 23, 17},  // A shared
                                           {0, 0, 2, 8, 8, 8}})    // both shared
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) cases.push_back(gemm_case(s, dt, options(ta, tb, 0.75f, 0.25f)));
  // 16-bit operands accumulate in f32: only the final rounding to 16 bits.
  for (DType dt : {DType::f16, DType::bf16})
    cases.push_back(gemm_case({0, 0, 0, 8, 8, 512}, dt, options(false, false, 1, 0)));
  // k = 1024: TF32's 10-bit mantissa would give errors near 1e-3; fp32 stays near 1e-5.
  for (bool t : {false, true}) {
    OpCase c = gemm_case({0, 0, 0, 64, 96, 1024}, DType::f32, options(t, t, 1, 0));
    c.backend_tol = {2e-4, 1e-5};
    cases.push_back(c);
  }
  OpCase large = gemm_case({0, 0, 0, 256, 384, 512}, DType::f32, options(false, true, 1, 0));
  large.backend_tol = {2e-4, 1e-5};
  cases.push_back(large);
  cases.push_back(gemm_case({0, 0, 0, 256, 384, 512}, DType::bf16, options(true, false, 1, 1)));
  // An empty inner dimension: C = beta C exactly (zeros over a NaN C when beta = 0).
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (float beta : {0.0f, 1.0f, 2.0f}) {
      cases.push_back(gemm_case({0, 0, 0, 5, 6, 0}, dt, options(false, false, 1, beta)));
      cases.push_back(gemm_case({2, 2, 2, 5, 6, 0}, dt, options(true, true, 1, beta)));
    }
  // The reduced-precision math modes: the reference rounds A and B the same way.
  for (ops::MathMode math : {ops::MathMode::tf32, ops::MathMode::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        OpCase c = gemm_case({0, 0, 0, 37, 53, 29}, DType::f32, options(ta, tb, 1, 0.5f, math));
        c.backend_tol = math == ops::MathMode::tf32 ? Tolerance{2e-2, 1e-2} : Tolerance{1e-4, 1e-4};
        cases.push_back(c);
      }

  // Views inside larger buffers (a storage offset, rows of odd length: misaligned for
  // vector loads): C rows [7, 7 + m) of a [40, n] buffer; the rows outside stay as they were.
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = 19, n = 23, k = 29;
        const ops::GemmOptions o = options(ta, tb, 1.5f, 0.5f);
        OpCase c = gemm_case({0, 0, 0, m, n, k}, dt, o, " views");
        const std::string key = c.op + c.params;
        const int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
        c.make_inputs = [=] {
          return Tensors{case_input(key, 0, {50, ta ? m : k}, -1, 1, dt),
                         case_input(key, 1, {60, tb ? k : n}, -1, 1, dt), case_input(key, 2, {40, n}, -1, 1, dt)};
        };
        c.run = [=](const Tensors& in) {
          Tensor out = in[2].clone(), view = out.narrow(7, m);
          ops::gemm(in[0].narrow(3, a_rows), in[1].narrow(5, b_rows), view, o);
          return Tensors{out};
        };
        c.reference = [=](const Tensors& in) {
          const Doubles a = values(in[0].narrow(3, a_rows)), b = values(in[1].narrow(5, b_rows));
          Doubles out = values(in[2]);
          const Doubles block(out.begin() + 7 * n, out.begin() + (7 + m) * n);
          const Doubles r = reference_gemm(a, b, block, m, n, k, o);
          std::copy(r.begin(), r.end(), out.begin() + 7 * n);
          return std::vector<Doubles>{out};
        };
        cases.push_back(c);
      }
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const ops::GemmOptions o = options(false, false, 1, 1);
    OpCase c = gemm_case({3, 3, 3, 13, 11, 17}, dt, o, " views");
    const std::string key = c.op + c.params;
    c.make_inputs = [=] {
      return Tensors{case_input(key, 0, {5, 13, 17}, -1, 1, dt), case_input(key, 1, {6, 17, 11}, -1, 1, dt),
                     case_input(key, 2, {7, 13, 11}, -1, 1, dt)};
    };
    c.run = [=](const Tensors& in) {
      Tensor out = in[2].clone(), view = out.narrow(3, 3);
      ops::gemm_batched(in[0].narrow(1, 3), in[1].narrow(2, 3), view, o);
      return Tensors{out};
    };
    c.reference = [=](const Tensors& in) {
      const Doubles a = values(in[0]), b = values(in[1]);
      Doubles out = values(in[2]);
      const int64_t mm = 13 * 17, kn = 17 * 11, mn = 13 * 11;
      for (int64_t q = 0; q < 3; ++q) {
        const Doubles c0(out.begin() + (3 + q) * mn, out.begin() + (4 + q) * mn);
        const Doubles r =
            reference_gemm(Doubles(a.begin() + (1 + q) * mm, a.begin() + (2 + q) * mm),
                           Doubles(b.begin() + (2 + q) * kn, b.begin() + (3 + q) * kn), c0, 13, 11, 17, o);
        std::copy(r.begin(), r.end(), out.begin() + (3 + q) * mn);
      }
      return std::vector<Doubles>{out};
    };
    cases.push_back(c);
  }
}

}  // namespace gridnn::test
