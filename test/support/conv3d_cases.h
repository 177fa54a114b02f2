// The convolution geometries the layer tests (test/models/layers/test_conv3d.cpp) and the op harness
// (test/ops/cases_conv3d.cpp) both run: pointwise (the GEMM-only path), 1x1x1 with
// stride 2 (inputs never read), 3x3x3 with padding 1, the stem's 7x7x7 stride 2 padding 3
// on a small volume, a non-cubic kernel with mixed strides, stride 2 on odd sizes, a kernel
// exactly as large as the padded input (one output voxel), one large enough that the
// CPU loops run on several OpenMP threads, and kernels of which only some taps reach the
// input (ops::conv3d_reaching_taps), or none, and channel counts past 16 that are not
// multiples of it (oneDNN runs those channels last, docs/design.md §3). And what the
// one-channel backward-filter tests (test/kernels/test_conv3d_one_channel.cpp, its GPU twin)
// both run on a case.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/conv3d.h"
#include "kernels/cpu/conv3d_one_channel.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {

struct Conv3dCase {
  const char* name;
  int64_t n, c, o;  // batch, input and output channels
  ops::Triple kernel, stride, padding, in;
};

inline const std::vector<Conv3dCase>& conv3d_cases() {
  static const std::vector<Conv3dCase> all = {
      {"pointwise", 2, 3, 4, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {3, 4, 5}},
      {"1x1x1_stride2", 1, 3, 2, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {5, 4, 7}},
      {"3x3x3_pad1", 3, 2, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {5, 6, 4}},
      {"7x7x7_stride2_pad3", 1, 1, 4, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {9, 8, 7}},
      {"7x7x7_stride2_pad3_batch", 2, 2, 3, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}, {5, 7, 6}},
      {"noncubic", 2, 2, 3, {3, 1, 2}, {1, 2, 1}, {1, 0, 1}, {4, 5, 6}},
      {"stride2_odd", 3, 3, 2, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {7, 5, 9}},
      {"kernel_fills_padded_input", 1, 2, 2, {4, 3, 3}, {1, 1, 1}, {0, 1, 0}, {4, 1, 3}},
      {"large_enough_for_threads", 2, 4, 5, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {12, 10, 11}},
      {"taps_reach_1x2x1", 2, 3, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 2, 1}},
      {"strided_taps_reach_2x3x2", 3, 2, 3, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {2, 3, 2}},
      {"no_tap_reaches", 2, 2, 3, {1, 2, 1}, {3, 1, 1}, {2, 1, 0}, {1, 2, 3}},
      {"channels_20_to_13", 2, 20, 13, {3, 2, 5}, {1, 1, 1}, {1, 0, 2}, {5, 6, 19}},
  };
  return all;
}

inline ops::Conv3dGeometry geometry_of(const Conv3dCase& k) {
  return ops::conv3d_geometry("test", k.c, k.o, k.kernel, k.stride, k.padding, k.in);
}

// Backward filter's operands for a case of one input channel, drawn from seeds `seed`,
// `seed` + 1 and `seed` + 2: x, dy, and what dw holds before (backward filter accumulates).
struct OneChannelInputs {
  Tensor x, dy, dw0;
};
inline OneChannelInputs one_channel_inputs(const Conv3dCase& k, uint64_t seed) {
  const ops::Conv3dGeometry g = geometry_of(k);
  return {random_tensor({k.n, 1, k.in[0], k.in[1], k.in[2]}, seed),
          random_tensor(ops::conv3d_output_shape(g, k.n), seed + 1),
          random_tensor(ops::conv3d_weight_shape(g), seed + 2)};
}

// dw0 plus the gradient by the CPU's run of the shared bodies (backward_filter_by_tiles).
inline Tensor one_channel_by_tiles(const OneChannelInputs& in, const ops::Conv3dGeometry& g) {
  Tensor dw = in.dw0.clone();
  kernels::cpu::one_channel::backward_filter_by_tiles(in.x, in.dy, g, dw);
  return dw;
}

}  // namespace gridnn::test
