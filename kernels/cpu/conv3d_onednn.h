// oneDNN's convolutions for the CPU backend (docs/design.md §3): kernels/cpu/conv3d.cpp asks
// here first and runs vol2col + GEMM when these return false.
//
// gridnn's tensors stay plain at the op boundary (x ncdhw, w oidhw, bias x). Each call
// reorders its operands into the layouts oneDNN chose for the geometry (format `any`:
// blocked, e.g. nCdhw16c, on AVX-512; activations channels last, ndhwc, where a channel
// count is not a multiple of 16), runs the JIT kernel, and reorders the result back.
// The blocked copies live in one workspace per thread shared by every convolution, grown
// to the largest layer on the first step, so a training step allocates nothing after it;
// it comes from gridnn's host allocator, so the allocator's peak and limit include it.
// Backward filter computes into the workspace and adds into dw (a reorder with a sum).
//
// Determinism: oneDNN repeats its results bit for bit for a fixed thread count, CPU and
// library; backward filter changes with the thread count (its reduction is split by
// thread), so gridnn's results do too. The thread count is part of each plan's key.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "kernels/conv3d_bodies.h"
#include "kernels/conv3d_workspace.h"

namespace gridnn::kernels::cpu::onednn {

enum class Pass { forward, backward_data, backward_filter };

// True when gridnn was built with oneDNN (GRIDNN_HAVE_ONEDNN).
bool built();
// oneDNN's implementation of `pass` for g on a batch of n ("brg:avx512_core",
// "jit:avx2", "gemm:jit"), or "" when it has only its reference kernel for it, cannot
// build it, or gridnn was built without oneDNN. The first "" for a geometry prints a
// one-time notice naming it.
std::string implementation(const Conv3dGeometry& g, int64_t n, Pass pass);

// The pass by oneDNN: true when it ran, false (nothing written) when implementation() is
// "". Arguments as kernels/conv3d.h's backend entry points: checked, f32, contiguous.
bool forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y);
bool backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx);
bool backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw);  // dw +=
// Backward data (dx null: none), `between` (when set), then backward filter, dy reordered into
// the blocked layout once when both passes want the same one; false (nothing written, nothing
// run) unless oneDNN runs both.
bool backward(const Tensor& x, const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor* dx, Tensor& dw,
              const std::function<void()>& between);

// The bytes `pass` of g on a batch of n asks of each per-thread workspace buffer (the
// operands' blocked copies by role, then the scratchpad); zeros where oneDNN does not run it.
// Builds and caches the plan, as a call would. The per-rank memory model adds these up.
Workspace workspace(const Conv3dGeometry& g, int64_t n, Pass pass, bool bias);

}  // namespace gridnn::kernels::cpu::onednn
