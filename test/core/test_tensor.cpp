// Tensor handles, views, explicit copies and the host allocator's accounting.
#include <gtest/gtest.h>

#include "core/readback.h"
#include "core/tensor.h"
#include "core/transfers.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

TEST(Tensor, EmptyZerosAndFromVector) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.nbytes(), 24u);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  Tensor t = Tensor::from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.data<int64_t>()[3], 4);
  EXPECT_EQ(t.str(), "i64[2, 2] on cpu");
  EXPECT_THROW(t.data<float>(), Error);  // wrong type
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), Error);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor().raw(), Error);
}

TEST(Tensor, ByteCountOverflowIsAnError) {
  // 2^61 eight-byte elements: the byte count would wrap to 0 without the check.
  EXPECT_THROW(Tensor::empty({int64_t(1) << 61}, DType::i64), Error);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor rows = t.narrow(1, 2);  // rows 1 and 2
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_TRUE(rows.shares_storage_with(t));
  EXPECT_EQ(rows.data<float>()[0], 4.0f);
  rows.data<float>()[0] = 40.0f;
  EXPECT_EQ(t.data<float>()[4], 40.0f);  // visible through the original
  Tensor flat = rows.reshape({8});
  EXPECT_EQ(flat.data<float>()[7], 11.0f);
  EXPECT_THROW(t.reshape({5}), Error);
  EXPECT_THROW(t.narrow(2, 2), Error);
  EXPECT_THROW(t.narrow(-1, 1), Error);
}

TEST(Tensor, CopiesAreExplicitAndDeep) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor handle = t;  // same storage
  Tensor c = t.clone();
  EXPECT_TRUE(handle.shares_storage_with(t));
  EXPECT_FALSE(c.shares_storage_with(t));
  c.data<float>()[0] = 9;
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  Tensor dst = Tensor::zeros({3});
  dst.copy_from(t);
  EXPECT_TRUE(test::tensors_equal(dst, t));
  Tensor wrong = Tensor::zeros({3}, DType::f16);
  EXPECT_THROW(wrong.copy_from(t), Error);
}

TEST(Tensor, StorageReturnsToTheAllocator) {
  AllocatorStats before = host_allocator().stats();
  {
    Tensor a = Tensor::empty({1000});
    Tensor view = a.narrow(10, 5);
    a = Tensor();                                                      // the view keeps the storage alive
    EXPECT_EQ(host_allocator().stats().in_use, before.in_use + 4032);  // 4000 bytes, in 64-byte units
  }
  AllocatorStats after = host_allocator().stats();
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_GE(after.peak_in_use, before.in_use + 4032);
  EXPECT_EQ(after.allocations, before.allocations + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Tensor::empty({3}).raw()) % 64, 0u);  // aligned
}

TEST(Tensor, CudaTensorsNeedADevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present; covered by gpu tests";
  EXPECT_THROW(Tensor::empty({2}, DType::f32, Device::cuda(0)), Error);
  Tensor t = Tensor::zeros({2});
  EXPECT_THROW(t.to(Device::cuda(0)), Error);
}

// core/readback.h on the host: the values as they were at start(), counted as one host read.
TEST(Readback, HostTensorIsCopiedAtStart) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3});
  Readback r;
  EXPECT_FALSE(r.pending());
  EXPECT_THROW(r.finish(), Error);
  reset_transfer_counts();
  r.start(t);
  EXPECT_EQ(transfer_counts().host_reads, 1);
  t.data<float>()[0] = 9;  // after start(): not seen
  EXPECT_TRUE(r.pending());
  EXPECT_EQ(r.finish().to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(r.pending());
  r.start(t);
  r.start(t.narrow(1, 2));  // finishes the first one
  EXPECT_EQ(r.finish().to_vector<float>(), (std::vector<float>{2, 3}));
}

}  // namespace
}  // namespace gridnn
