// Randomized sweeps (label slow): many seeded shapes for GEMM and reductions against
// plain double loops, to catch indexing errors that a handful of hand-picked shapes miss.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "test/support/random_tensor.h"
#include "test/support/reference.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::to_doubles;

// A reproducible integer in [lo, hi] for draw i of the sweep `what`.
int64_t pick(const char* what, uint64_t i, int64_t lo, int64_t hi) {
  uint32_t w = philox_words(2026, philox_stream_id(what), i).v[0];
  return lo + int64_t(w % uint32_t(hi - lo + 1));
}

TEST(Sweep, GemmRandomShapesTransposesAndBatches) {
  for (uint64_t t = 0; t < 2000; ++t) {
    const int64_t m = pick("m", t, 1, 40), n = pick("n", t, 1, 40), k = pick("k", t, 0, 40);
    const int64_t batch = pick("batch", t, 1, 3);
    ops::GemmOptions o;
    o.transpose_a = pick("ta", t, 0, 1);
    o.transpose_b = pick("tb", t, 0, 1);
    o.alpha = float(pick("alpha", t, -2, 2)) * 0.5f;
    o.beta = float(pick("beta", t, 0, 2)) * 0.5f;
    const bool share_b = pick("share", t, 0, 1);
    Tensor a = test::random_tensor(o.transpose_a ? Shape{batch, k, m} : Shape{batch, m, k}, t);
    Shape b_one = o.transpose_b ? Shape{n, k} : Shape{k, n};
    Tensor b =
        share_b ? test::random_tensor(b_one, t + 1000) : test::random_tensor({batch, b_one[0], b_one[1]}, t + 1000);
    Tensor c = test::random_tensor({batch, m, n}, t + 2000);
    std::vector<double> va = to_doubles(a), vb = to_doubles(b), vc = to_doubles(c);
    ops::gemm_batched(a, b, c, o);
    std::vector<double> got = to_doubles(c);
    auto slice = [](const std::vector<double>& v, int64_t q, int64_t size) {
      return std::vector<double>(v.begin() + q * size, v.begin() + (q + 1) * size);
    };
    for (int64_t q = 0; q < batch; ++q) {
      std::vector<double> ref = test::reference_gemm(slice(va, q, m * k), share_b ? vb : slice(vb, q, k * n),
                                                     slice(vc, q, m * n), m, n, k, o);
      for (int64_t e = 0; e < m * n; ++e)
        ASSERT_NEAR(got[size_t(q * m * n + e)], ref[size_t(e)], 1e-4 * (1 + std::fabs(ref[size_t(e)])))
            << "case " << t << ": batch " << batch << " m " << m << " n " << n << " k " << k << " ta " << o.transpose_a
            << " tb " << o.transpose_b << " shared B " << share_b;
    }
  }
}

TEST(Sweep, ReductionsOverRandomFiveDimensionalShapes) {
  for (uint64_t t = 0; t < 600; ++t) {
    const int rank = int(pick("rank", t, 1, 5));
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(pick("dim", t * 8 + uint64_t(d), 1, rank <= 2 ? 700 : 9));
    Shape s(dims);
    const int dim = int(pick("reduce_dim", t, 0, rank - 1));
    Tensor x = test::random_tensor(s, t + 7);
    std::vector<double> sum = to_doubles(ops::sum(x, dim)), mx = to_doubles(ops::max(x, dim));
    std::vector<double> ref_sum = test::reference_reduce(ops::ReduceOp::sum, x, dim);
    std::vector<double> ref_max = test::reference_reduce(ops::ReduceOp::max, x, dim);
    for (size_t o = 0; o < sum.size(); ++o) {
      ASSERT_NEAR(sum[o], ref_sum[o], 1e-5 * (1 + double(s[dim])))
          << "case " << t << " shape " << s.str() << " dim " << dim;
      ASSERT_EQ(mx[o], ref_max[o]) << "case " << t << " shape " << s.str() << " dim " << dim;
    }
  }
}

}  // namespace
}  // namespace gridnn
