// The layout ops (kernels/layout.h) against plain index loops: every permutation of a 3-D and
// a 5-D tensor, slabs along each dimension (copied, added, filled) for every dtype they take,
// large enough that the CPU backend splits its rows over threads; and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "test/support/error_message.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {
using test::random_tensor;
using test::to_doubles;

// The multi-index of flat index i in `shape` (row-major).
std::vector<int64_t> index_of(int64_t i, const Shape& shape) {
  std::vector<int64_t> c(size_t(shape.rank()));
  for (int k = shape.rank() - 1; k >= 0; --k) {
    c[size_t(k)] = i % shape[k];
    i /= shape[k];
  }
  return c;
}
int64_t flat_of(const std::vector<int64_t>& c, const Shape& shape) {
  int64_t i = 0;
  for (int k = 0; k < shape.rank(); ++k) i = i * shape[k] + c[size_t(k)];
  return i;
}

TEST(Layout, EveryPermutationMatchesTheIndexLoop) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 3, 4, 1, 5}}) {
    const Tensor x = random_tensor(shape, 1);
    const std::vector<double> xv = to_doubles(x);
    std::vector<int> perm(size_t(shape.rank()));
    std::iota(perm.begin(), perm.end(), 0);
    do {
      const Tensor y = ops::permute(x, perm);
      const std::vector<double> yv = to_doubles(y);
      ASSERT_EQ(yv.size(), xv.size());
      for (int64_t i = 0; i < y.numel(); ++i) {
        const std::vector<int64_t> c = index_of(i, y.shape());
        std::vector<int64_t> src(c.size());
        for (size_t k = 0; k < c.size(); ++k) src[size_t(perm[k])] = c[k];
        ASSERT_EQ(yv[size_t(i)], xv[size_t(flat_of(src, shape))]) << shape.str() << " element " << i;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(Layout, PermuteEveryDtypeBitwiseAndLargeTransposes) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const Tensor x = random_tensor({67, 45, 33}, 2, -100, 100, dt);
    const Tensor y = ops::permute(ops::permute(x, {2, 0, 1}), {1, 2, 0});
    EXPECT_TRUE(test::tensors_equal(y, x)) << dtype_name(dt);
  }
  // A transpose large enough to be split over threads, against the loop.
  const Tensor m = random_tensor({301, 257}, 3);
  const Tensor t = ops::permute(m, {1, 0});
  const auto mv = to_doubles(m), tv = to_doubles(t);
  for (int64_t i = 0; i < 301; ++i)
    for (int64_t j = 0; j < 257; ++j) ASSERT_EQ(tv[size_t(j * 301 + i)], mv[size_t(i * 257 + j)]);
}

TEST(Layout, SlabsAlongEachDimensionCopyAddAndFill) {
  const Shape src_shape{3, 4, 9, 5, 6};
  const Tensor src = random_tensor(src_shape, 4);
  const auto sv = to_doubles(src);
  for (int dim = 0; dim < 5; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const Shape dst_shape = src_shape.with(dim, src_shape[dim] + 3);
    const int64_t count = src_shape[dim] - 1, src_first = 1, dst_first = 2;
    Tensor dst = random_tensor(dst_shape, 5);
    const auto before = to_doubles(dst);
    ops::copy_slices(src, dim, src_first, dst, dst_first, count);
    auto copied = to_doubles(dst);
    Tensor sum = Tensor::empty(dst_shape);
    sum.copy_from(Tensor::from_vector(std::vector<float>(before.begin(), before.end()), dst_shape));
    ops::add_slices(src, dim, src_first, sum, dst_first, count);
    const auto added = to_doubles(sum);
    Tensor filled = Tensor::empty(dst_shape);
    filled.copy_from(dst);
    ops::fill_slices(filled, dim, dst_first, count, -7.5);
    const auto fv = to_doubles(filled);
    for (int64_t i = 0; i < dst.numel(); ++i) {
      std::vector<int64_t> c = index_of(i, dst_shape);
      const int64_t k = c[size_t(dim)] - dst_first;
      if (k >= 0 && k < count) {
        c[size_t(dim)] = k + src_first;
        const double s = sv[size_t(flat_of(c, src_shape))];
        ASSERT_EQ(copied[size_t(i)], s);
        ASSERT_EQ(added[size_t(i)], double(float(before[size_t(i)]) + float(s)));
        ASSERT_EQ(fv[size_t(i)], -7.5);
      } else {
        ASSERT_EQ(copied[size_t(i)], before[size_t(i)]);
        ASSERT_EQ(added[size_t(i)], before[size_t(i)]);
        ASSERT_EQ(fv[size_t(i)], copied[size_t(i)]);
      }
    }
  }
}

TEST(Layout, SliceIsACopyOfTheSlices) {
  const Tensor x = random_tensor({2, 3, 40, 33, 17}, 6);
  const Tensor s = ops::slice(x, 2, 7, 20);
  EXPECT_EQ(s.shape(), Shape({2, 3, 20, 33, 17}));
  Tensor back = Tensor::zeros(x.shape());
  ops::copy_slices(s, 2, 0, back, 7, 20);
  EXPECT_TRUE(test::tensors_equal(ops::slice(back, 2, 7, 20), s));
  for (DType dt : {DType::f16, DType::bf16, DType::i64}) {
    const Tensor t = random_tensor({4, 5, 6}, 7, -3, 3, dt);
    Tensor z = Tensor::zeros({4, 5, 6}, dt);
    ops::copy_slices(ops::slice(t, 1, 0, 5), 1, 0, z, 0, 5);
    EXPECT_TRUE(test::tensors_equal(z, t)) << dtype_name(dt);
  }
  EXPECT_EQ(ops::slice(x, 2, 5, 0).numel(), 0);  // an empty slab is fine
}

TEST(Layout, ErrorsSayWhatIsWrong) {
  const Tensor x = random_tensor({2, 3, 4}, 8);
  EXPECT_NE(test::error_message([&] { ops::permute(x, {0, 0, 1}); }).find("each of the 3 dimensions"),
            std::string::npos);
  Tensor wrong = Tensor::empty({3, 3, 4});
  EXPECT_NE(test::error_message([&] { ops::permute(x, {1, 0, 2}, wrong); }).find("is not the shape"),
            std::string::npos);
  Tensor dst = Tensor::empty({2, 3, 2});
  EXPECT_NE(test::error_message([&] { ops::copy_slices(x, 2, 3, dst, 0, 2); }).find("out of range"),
            std::string::npos);
  Tensor other = Tensor::empty({2, 4, 4});
  EXPECT_NE(test::error_message([&] { ops::copy_slices(x, 2, 0, other, 0, 1); }).find("differ in dimension 1"),
            std::string::npos);
  Tensor ints = Tensor::zeros({2, 3, 4}, DType::i32), ints2 = Tensor::zeros({2, 3, 4}, DType::i32);
  EXPECT_NE(test::error_message([&] { ops::add_slices(ints, 0, 0, ints2, 0, 1); }).find("floating"),
            std::string::npos);
  Tensor same = x.clone();
  EXPECT_NE(test::error_message([&] { ops::copy_slices(same, 0, 0, same, 1, 1); }).find("shares memory"),
            std::string::npos);
}

}  // namespace
}  // namespace gridnn
