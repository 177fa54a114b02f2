// The layout ops' contracts (kernels/layout.h): slice round-trips and empty slabs, and the
// errors. Their values (every permutation, slabs along each dimension, every dtype) are op
// harness cases (test/ops/cases_layout.cpp).
#include <gtest/gtest.h>

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
  EXPECT_NE(test::error_message([&] {
              ops::permute(x, {0, 0, 1});
            }).find("each of the 3 dimensions"),
            std::string::npos);
  Tensor wrong = Tensor::empty({3, 3, 4});
  EXPECT_NE(test::error_message([&] {
              ops::permute(x, {1, 0, 2}, wrong);
            }).find("is not the shape"),
            std::string::npos);
  Tensor dst = Tensor::empty({2, 3, 2});
  EXPECT_NE(test::error_message([&] { ops::copy_slices(x, 2, 3, dst, 0, 2); }).find("out of range"), std::string::npos);
  Tensor other = Tensor::empty({2, 4, 4});
  EXPECT_NE(test::error_message([&] { ops::copy_slices(x, 2, 0, other, 0, 1); }).find("differ in dimension 1"),
            std::string::npos);
  Tensor ints = Tensor::zeros({2, 3, 4}, DType::i32), ints2 = Tensor::zeros({2, 3, 4}, DType::i32);
  EXPECT_NE(test::error_message([&] { ops::add_slices(ints, 0, 0, ints2, 0, 1); }).find("floating"), std::string::npos);
  Tensor same = x.clone();
  EXPECT_NE(test::error_message([&] { ops::copy_slices(same, 0, 0, same, 1, 1); }).find("shares memory"),
            std::string::npos);
}

}  // namespace
}  // namespace gridnn
