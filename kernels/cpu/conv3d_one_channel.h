// Backward filter of a convolution with one input channel (a network's stem on a scan's
// single intensity channel), plane by plane, for the CPU backend (kernels/cpu/conv3d.cpp).
//
// oneDNN 2.6 runs it slowly and on one thread: the stem of ResAttNet3D-18 at 96^3, batch 2,
// took 120-140 ms on 1 or 2 threads, 40% of a training step, and its JIT kernel on a depth
// slab longer still; this takes 52-55 ms on 1 thread and 27-29 on 2 (bench/results/cpu-speed.md).
// Full vol2col would write kd copies of the input. Here each input depth plane id is
// unrolled once, a few output rows at a time, into a 2D column matrix cols [kh kw, rows Wo].
// The depth taps a that read it (od sd + a - pd = id: one phase of a modulo sd) take it in one
// GEMM, their output planes' rows of dy packed one tap after another:
//   dW[a_lo.., :] [taps O, kh kw] += [dy_n[:, od(a_lo), rows]; dy_n[:, od(a_lo + sd), rows]; ...] * cols^T
// into partials whose rows (a, o) keep each phase's taps together.
// Work is split into fixed items (a sample's run of kPlanesPerItem input planes), each
// summed into its own partial dW in plane order; the partials are added into dw in item
// order. The result is the same bits on any number of threads.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/conv3d_bodies.h"

namespace gridnn::kernels::cpu::one_channel {

// True for the geometries this kernel takes: one input channel, not pointwise.
bool takes(const Conv3dGeometry& g);
// dw [O, 1, kd, kh, kw] += the gradient of the filter, from x [N, 1, D, H, W] and dy.
void backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw);
// The bytes it allocates for a batch of n: the partials and each thread's columns.
int64_t scratch_bytes(const Conv3dGeometry& g, int64_t n);

// The same gradient in the order of the shared bodies (kernels/conv3d_one_channel_bodies.h):
// a partial per tile (n, od) and filter element, each summed over the output plane in
// row-major order with fmaf, then added into dw in tile order. It gives the bits the CUDA
// kernel (kernels/cuda/conv3d_one_channel.cu) gives, on any number of threads; the GPU tests
// compare the two. Slower than backward_filter (no GEMM): not on the CPU's training path.
// Takes the geometries kernels::one_channel::takes accepts.
void backward_filter_by_tiles(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw);

}  // namespace gridnn::kernels::cpu::one_channel
