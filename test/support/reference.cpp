#include "test/support/reference.h"

#include <algorithm>
#include <cmath>

#include "test/support/tensor_compare.h"

namespace gridnn::test {

std::vector<double> reference_gemm(const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& c0, int64_t m, int64_t n, int64_t k,
                                   const ops::GemmOptions& o) {
  std::vector<double> c(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = o.transpose_a ? a[size_t(p * m + i)] : a[size_t(i * k + p)];
        double bv = o.transpose_b ? b[size_t(j * k + p)] : b[size_t(p * n + j)];
        acc += av * bv;
      }
      double prev = o.beta == 0 ? 0 : o.beta * c0[size_t(i * n + j)];
      c[size_t(i * n + j)] = o.alpha * acc + prev;
    }
  return c;
}

std::vector<double> reference_reduce(ops::ReduceOp op, const Tensor& x, int dim) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1, len = s[dim];
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (int i = dim + 1; i < s.rank(); ++i) inner *= s[i];
  std::vector<double> v = to_doubles(x), out(size_t(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double acc = op == ops::ReduceOp::max ? -INFINITY : 0.0;
      for (int64_t q = 0; q < len; ++q) {
        double e = v[size_t((o * len + q) * inner + in)];
        if (op == ops::ReduceOp::sum) acc += e;
        if (op == ops::ReduceOp::sum_squares) acc += e * e;
        if (op == ops::ReduceOp::max && !std::isnan(acc) && (std::isnan(e) || e > acc)) acc = e;  // NaN sticks
      }
      out[size_t(o * inner + in)] = acc;
    }
  return out;
}

}  // namespace gridnn::test
