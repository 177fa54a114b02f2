// 3D convolution, NCDHW, fp32 tensors: forward, backward data, backward filter, backward bias.
//
// Any kernel (kd, kh, kw), stride and zero padding per dimension; dilation 1, groups 1;
// cross-correlation as in PyTorch's Conv3d. Shapes, for a batch of N:
//   x [N, C, D, H, W]   w [O, C, kd, kh, kw]   bias [O]   y [N, O, Do, Ho, Wo]
// Backends: on the CPU oneDNN's JIT kernels (kernels/cpu/conv3d_onednn.h) where oneDNN has
// one for the geometry, else vol2col + GEMM (kernels/cpu/conv3d.cpp), the path the
// tests also compare against; cuDNN on the GPU (kernels/cuda/conv3d_cudnn.cpp, algorithm
// chosen once per shape and math mode and cached), where backward filter with one input
// channel may run gridnn's own kernel instead (kernels/cuda/conv3d_one_channel.h, unless
// cuDNN was twice as fast on the shape's first call). All are deterministic for a fixed
// thread count (oneDNN's backward filter changes with the thread count). Activation gradients overwrite (dx); parameter
// gradients accumulate (dw, db), as everywhere in gridnn.
//
// Precision (the last argument, kernels/math_mode.h; tensors stay f32 in every mode):
//   fp32  the default: fp32 FMA (cuDNN CUDNN_FMA_MATH, never TF32 behind your back).
//   tf32  cuDNN CUDNN_TENSOR_OP_MATH on the fp32 tensors; the CPU rounds the two operands
//         to TF32 and runs the fp32 path.
//   bf16  the two operands of each op (x and w, dy and w, x and dy) rounded to bf16, fp32
//         accumulation. cuDNN: bf16 scratch copies, bf16 descriptors, fp32 compute type,
//         CUDNN_TENSOR_OP_MATH; its classic API writes the result in the inputs' type, so
//         the result is rounded to bf16 once (relative 2^-9) before it is widened into the
//         f32 output (backward filter: added to dw). The CPU rounds the operands into
//         scratch copies and runs the fp32 path (fp32 result, no final rounding).
// The bias (forward and backward) is always fp32.
#pragma once

#include <array>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "kernels/conv3d_bodies.h"
#include "kernels/conv3d_workspace.h"
#include "kernels/layout_bodies.h"
#include "kernels/math_mode.h"

namespace gridnn::ops {

using kernels::Conv3dGeometry;
using Triple = std::array<int64_t, 3>;  // depth, height, width

// Checks the sizes and computes the output size (in + 2 p - k) / s + 1 per dimension.
// Throws gridnn::Error naming `who` (the op or layer) when a channel count, kernel size,
// stride or input size is not positive, a padding is negative, or the kernel is larger than
// the padded input.
Conv3dGeometry conv3d_geometry(const std::string& who, int64_t in_channels, int64_t out_channels, Triple kernel,
                               Triple stride, Triple padding, Triple in_size);
// "C 3 -> O 8, kernel [3, 3, 3], stride [1, 1, 1], padding [1, 1, 1], input [5, 6, 7] -> output [5, 6, 7]"
std::string str(const Conv3dGeometry& g);

// The taps of g's kernel that read the input from at least one output voxel: per dimension
// the range [first, first + count); the taps outside it meet padding alone. A kernel wider
// than its input reaches with few: ResAttNet3D's layer4 3^3 on a 1x2x1 input with 3 of its
// 27 taps. `geometry` is g on that range (kernel = count, padding - first, the same output
// voxels): every product it leaves out has a padding zero as its input. The CPU backend
// runs its convolutions on it (docs/design.md §3).
struct ConvTaps {
  Triple first{}, count{};
  Conv3dGeometry geometry;
  bool all(const Conv3dGeometry& g) const;  // every tap reaches the input
  bool none() const;                        // no tap does: every output voxel is padding alone
  int64_t volume() const { return count[0] * count[1] * count[2]; }
};
ConvTaps conv3d_reaching_taps(const Conv3dGeometry& g);
// The taps a backend whose padding is the same on both sides runs (cuDNN, which derives the
// output size from the kernel and the padding): those that reach, widened per dimension to
// the fewest taps around them whose geometry has g's output size. The taps added read
// padding alone, like those dropped.
ConvTaps conv3d_symmetric_taps(const Conv3dGeometry& g);
// g's weights [O, C, kd, kh, kw] on the taps t keeps, as a box (kernels/layout_bodies.h)
// between g's weights and t.geometry's: `gather` reads g's and writes t.geometry's, else the
// other way (for dw += the gradient on the taps). The one rule both backends move weights by.
kernels::StridedBox conv3d_taps_box(const Conv3dGeometry& g, const ConvTaps& t, bool gather);
// The output shape [N, O, Do, Ho, Wo] for a batch of n.
Shape conv3d_output_shape(const Conv3dGeometry& g, int64_t n);
// The weight shape [O, C, kd, kh, kw].
Shape conv3d_weight_shape(const Conv3dGeometry& g);

// y = conv(x, w) (+ bias[o] when bias is defined). y is overwritten.
void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                    MathMode math = MathMode::fp32);
// dx = dL/dx for dy = dL/dy (overwritten).
void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx,
                          MathMode math = MathMode::fp32);
// dw += dL/dw (accumulates).
void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw,
                            MathMode math = MathMode::fp32);
// One layer's backward: backward data (when dx is defined) then backward filter, as the two
// calls above, bit for bit; on the CPU with oneDNN the blocked copy of dy is made once for
// both passes instead of once each. `between`, when set, runs once in between, dx final and
// dw not yet touched (a depth slab's halo gradients leave while the filter's is computed).
void conv3d_backward(const Tensor& x, const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx,
                     Tensor& dw, MathMode math = MathMode::fp32, const std::function<void()>& between = {});
// db[o] += sum of dy[:, o] (accumulates).
void conv3d_backward_bias(const Tensor& dy, Tensor& db);

// Which implementation runs the CPU's convolutions:
//   onednn   oneDNN where it has a kernel for the geometry and pass (the default), else
//            vol2col + GEMM with a one-time notice on stderr
//   vol2col  always vol2col + GEMM
// The environment variable GRIDNN_CPU_CONV=onednn|vol2col sets it at startup; a build
// without oneDNN runs vol2col where oneDNN would. With onednn chosen, backward filter with
// one input channel runs plane by plane instead (kernels/cpu/conv3d_one_channel.h).
enum class CpuConv { onednn, vol2col };
CpuConv cpu_conv();
CpuConv set_cpu_conv(CpuConv c);  // returns the previous choice
enum class ConvPass { forward, backward_data, backward_filter };
// What runs `pass` of g on a CPU batch of n: "onednn jit:avx512_core" (oneDNN's name of its
// kernel), "planes+gemm" or "vol2col+gemm".
std::string conv3d_cpu_implementation(const Conv3dGeometry& g, int64_t n, ConvPass pass);
// What the CPU's convolution of g on a batch of n allocates besides its operands (the per-rank
// memory model's part of a convolution): the per-thread workspace buffers oneDNN's passes ask
// for (the largest per buffer over the passes that run), and what a pass allocates for its
// length: vol2col's column buffer, the one-channel backward filter's partials (the largest
// over the backward passes), and for a kernel of which only some taps reach the input, the
// copy of the weights on those taps (with, in backward, their gradient).
struct Conv3dCpuMemory {
  kernels::Workspace workspace{};  // kernels/conv3d_workspace.h, by buffer
  int64_t forward_scratch = 0, backward_scratch = 0;
};
Conv3dCpuMemory conv3d_cpu_memory(const Conv3dGeometry& g, int64_t n, bool bias, bool input_gradient);
// The most bytes of workspace a CUDA convolution of g on a batch of n may use (docs/design.md
// §6a): the larger of its input and its output in f32. cuDNN's algorithms that ask for more
// are passed over (the next deterministic one runs), and the one-channel kernel's partials
// must fit too; the per-rank memory model holds the largest budget of a network's
// convolutions as the device's one workspace buffer.
int64_t cuda_conv_workspace_budget(const Conv3dGeometry& g, int64_t n);

}  // namespace gridnn::ops

// Backend entry points: arguments already checked (f32, contiguous, shapes consistent).
namespace gridnn::kernels::cpu {
void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                    ops::MathMode math);
void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx, ops::MathMode math);
void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw, ops::MathMode math);
void conv3d_backward(const Tensor& x, const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx,
                     Tensor& dw, ops::MathMode math, const std::function<void()>& between);  // dx may be undefined
void conv3d_backward_bias(const Tensor& dy, Tensor& db);
// The column buffer's size limit in floats (default 2^24); returns the previous one. Tests
// set it tiny to run the slab loop over one output depth plane at a time.
int64_t conv3d_set_column_budget(int64_t floats);
// The bytes of vol2col's buffers for one pass of g on batch n: the column buffer, or backward
// filter's column and dy buffers when samples share a GEMM (0 for a pointwise kernel).
int64_t conv3d_column_bytes(const Conv3dGeometry& g, int64_t n, bool backward_filter);
// True when backward filter of g runs plane by plane (kernels/cpu/conv3d_one_channel.h): one
// input channel, with the oneDNN implementation chosen (vol2col stays the plain reference).
bool conv3d_filter_by_planes(const Conv3dGeometry& g);
// How many samples backward filter's vol2col + GEMM puts into one GEMM (1: one per sample).
int64_t conv3d_filter_samples_per_gemm(const Conv3dGeometry& g, int64_t n);
}  // namespace gridnn::kernels::cpu
namespace gridnn::kernels::cuda {  // cuDNN builds only (GRIDNN_HAVE_CUDNN)
void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                    ops::MathMode math);
void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx, ops::MathMode math);
void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw, ops::MathMode math);
void conv3d_backward_bias(const Tensor& dy, Tensor& db);
}  // namespace gridnn::kernels::cuda
