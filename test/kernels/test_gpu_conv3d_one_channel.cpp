// Backward filter with one input channel on cuda:0: the CUDA kernel
// (kernels/cuda/conv3d_one_channel.h) gives the bits of the CPU's run of the shared bodies
// (kernels/conv3d_one_channel_bodies.h), on small geometries, the stem's, channel counts
// that are not multiples of 4, a row too wide for the default shared memory and kernels
// whose taps read padding alone; and the op (which runs it, or cuDNN where cuDNN was twice as
// fast on the geometry's first call) agrees with the CPU and repeats bit for bit. Label gpu.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/conv3d.h"
#include "kernels/cpu/conv3d_one_channel.h"
#include "test/support/conv3d_cases.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"
#if GRIDNN_HAVE_CUDA && GRIDNN_HAVE_CUDNN
#include "kernels/cuda/conv3d_one_channel.h"
#endif

namespace gridnn::test {
namespace {

using GpuOneChannel = GpuTest;

const std::vector<Conv3dCase>& cases() {
  static const std::vector<Conv3dCase> all = {
      {"k3_s1_p1", 2, 1, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {5, 7, 6}},
      {"k3_s2_p2_o5", 3, 1, 5, {3, 3, 3}, {2, 2, 2}, {2, 2, 2}, {7, 5, 9}},
      {"k3_s1_p3", 2, 1, 2, {3, 3, 3}, {1, 1, 1}, {3, 3, 3}, {3, 4, 5}},
      {"k7_s1_p7", 1, 1, 3, {7, 7, 7}, {1, 1, 1}, {7, 7, 7}, {3, 2, 4}},
      {"mixed_o37", 3, 1, 37, {3, 5, 2}, {1, 2, 3}, {2, 0, 1}, {6, 9, 8}},
      {"stem_32", 2, 1, 16, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {32, 32, 32}},
      {"stem_odd", 3, 1, 16, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {13, 21, 17}},
      {"wide_row", 1, 1, 8, {7, 7, 7}, {1, 1, 1}, {3, 3, 3}, {4, 5, 600}},  // one row past 48 KiB
  };
  return all;
}

TEST_F(GpuOneChannel, TheKernelGivesTheCpuBodysBits) {
  GRIDNN_NEEDS_REAL_GPU("the CUDA one-channel backward filter kernel");
#if GRIDNN_HAVE_CUDA && GRIDNN_HAVE_CUDNN
  namespace kernel = kernels::cuda::one_channel;
  for (const Conv3dCase& k : cases()) {
    const ops::Conv3dGeometry g = geometry_of(k);
    ASSERT_TRUE(kernel::fits(g, gpu().index)) << k.name;
    const OneChannelInputs in = one_channel_inputs(k, 21);
    const Tensor want = one_channel_by_tiles(in, g);
    const Tensor x = on_gpu(in.x), dy = on_gpu(in.dy);
    Tensor workspace = Tensor::empty({int64_t(kernel::workspace_bytes(g, k.n) / sizeof(float))}, DType::f32, gpu());
    for (int run = 0; run < 2; ++run) {
      Tensor dw = on_gpu(in.dw0);
      kernel::backward_filter(x, dy, g, dw, workspace.raw());
      EXPECT_TRUE(tensors_equal(dw.to(Device::cpu()), want)) << k.name << " run " << run;
    }
  }
#else
  GTEST_SKIP() << "built without cuDNN";
#endif
}

// The op on the device: within fp32 reordering of the CPU (cuDNN may have won the timing),
// and the same bits on every call, the first (which timed both) included.
TEST_F(GpuOneChannel, TheOpAgreesWithTheCpuAndRepeats) {
  for (const Conv3dCase& k : cases()) {
    const ops::Conv3dGeometry g = geometry_of(k);
    const OneChannelInputs in = one_channel_inputs(k, 21);
    const Tensor want = one_channel_by_tiles(in, g);
    const Tensor x = on_gpu(in.x), dy = on_gpu(in.dy);
    std::vector<Tensor> got;
    for (int run = 0; run < 3; ++run) {
      Tensor dw = on_gpu(in.dw0);
      ops::conv3d_backward_filter(x, dy, g, dw);
      got.push_back(dw.to(Device::cpu()));
    }
    EXPECT_LT(max_relative_error(got[0], want), 1e-5) << k.name;
    EXPECT_TRUE(tensors_equal(got[1], got[0])) << k.name << ": the first call, which timed both, and the next";
    EXPECT_TRUE(tensors_equal(got[2], got[1])) << k.name;
  }
}

}  // namespace
}  // namespace gridnn::test
