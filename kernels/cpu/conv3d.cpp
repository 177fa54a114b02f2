// CPU backend of kernels/conv3d.h: oneDNN where it has a kernel for the geometry
// (kernels/cpu/conv3d_onednn.h), except backward filter with one input channel, which runs
// plane by plane (kernels/cpu/conv3d_one_channel.h); else vol2col + GEMM (kernels/conv3d_bodies.h, kernels/gemm.h),
// each on the kernel's taps that reach the input (ops::conv3d_reaching_taps): the weights on
// those taps are copied out, and their gradient added back into dw.
//
// Per sample n, and per slab of output depth planes [od0, od1) (so the column buffer stays
// under column_budget floats however large the volume):
//   forward          y_n[:, slab]  = W [O, K] * col [K, slab]             (K = C kd kh kw)
//   backward data    dcol          = W^T [K, O] * dy_n[:, slab];  dx_n += col2vol(dcol)
//   backward filter  dW [O, K]    += dy_n[:, slab] * col^T
// A sample whose output is under kGroupBelow voxels (ResAttNet3D's layer4 on small inputs:
// 8) would give backward filter a GEMM too short to run well, so up to the column budget's
// worth of such samples share one: dW += [dy_n0 .. dy_n1] * [col_n0 .. col_n1]^T.
// A 1x1x1 kernel with stride 1 and no padding skips vol2col: x_n [C, P] is the column
// matrix. Samples and slabs run in order and col2vol works per input row, so every
// result is deterministic; the loops inside use parallel_for and the GEMM's threads.
// tf32 and bf16 math (kernels/math_mode.h) are emulated: each op first rounds its two
// operands into scratch copies (rounded_operand, kernels/gemm.h), then runs the fp32 path.
#include "kernels/conv3d.h"

#include <algorithm>

#include "kernels/cpu/conv3d_one_channel.h"
#include "kernels/cpu/conv3d_onednn.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"

namespace gridnn::kernels::cpu {
namespace {

bool use_onednn() { return ops::cpu_conv() == ops::CpuConv::onednn; }

int64_t column_budget = int64_t(1) << 24;  // floats in the column buffer (64 MiB)

// Output depth planes per slab: as many as fit in the budget, at least one.
int64_t planes_per_slab(const Conv3dGeometry& g) {
  const int64_t per_plane = g.col_rows() * g.out_plane();
  const int64_t planes = per_plane > 0 ? column_budget / per_plane : g.out_size[0];
  return planes < 1 ? 1 : (planes > g.out_size[0] ? g.out_size[0] : planes);
}

// A view of `t`'s storage starting `offset` elements in: the base pointer handed to the
// strided GEMM below (which reads only what the GemmProblem's sizes and strides say).
Tensor at(const Tensor& t, int64_t offset) {
  const Tensor flat = t.reshape({t.numel()});
  return flat.narrow(offset, t.numel() - offset);
}

// C [m, n] (row stride ldc) = op(A) op(B) + beta C, one matrix, row-major.
void gemm_at(const Tensor& a, int64_t lda, bool ta, const Tensor& b, int64_t ldb, bool tb, Tensor c, int64_t ldc,
             int64_t m, int64_t n, int64_t k, float beta) {
  gemm(matrix_problem(m, n, k, ta, lda, tb, ldb, ldc, beta), a, b, c);
}

// Fills the column matrix of sample `xn` for planes [od0, od1).
void vol2col(const float* xn, const Conv3dGeometry& g, int64_t od0, int64_t od1, float* col) {
  const int64_t cols = (od1 - od0) * g.out_plane();
  parallel_for(
      g.col_rows(), [&](int64_t row) { body::vol2col_row(xn, g, row, od0, od1, col + row * cols); }, cols);
}

// Backward filter's group of samples, and the bytes of its column and dy buffers.
constexpr int64_t kGroupBelow = 1024;

// The columns and the gathered dy of a group, two host tensors.
int64_t group_bytes(const Conv3dGeometry& g, int64_t samples) {
  return host_floats_bytes(g.col_rows() * samples * g.out_volume()) +
         host_floats_bytes(g.out_channels * samples * g.out_volume());
}

}  // namespace

int64_t conv3d_filter_samples_per_gemm(const Conv3dGeometry& g, int64_t n) {
  const int64_t P = g.out_volume();
  if (g.is_pointwise() || P >= kGroupBelow || planes_per_slab(g) < g.out_size[0]) return 1;
  return std::clamp<int64_t>(column_budget / (g.col_rows() * P), 1, n);
}

int64_t conv3d_column_bytes(const Conv3dGeometry& g, int64_t n, bool backward_filter) {
  if (g.is_pointwise()) return 0;
  const int64_t group = backward_filter ? conv3d_filter_samples_per_gemm(g, n) : 1;
  if (group > 1) return group_bytes(g, group);
  return host_floats_bytes(g.col_rows() * planes_per_slab(g) * g.out_plane());
}

bool conv3d_filter_by_planes(const Conv3dGeometry& g) { return use_onednn() && one_channel::takes(g); }

int64_t conv3d_set_column_budget(int64_t floats) {
  const int64_t previous = column_budget;
  column_budget = floats < 1 ? 1 : floats;
  return previous;
}

namespace {

// The four passes on every tap of g; the entry points at the end of the file hand them g on
// the taps that reach the input.
void forward_all_taps(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                      ops::MathMode math) {
  const Tensor x = rounded_operand(x_in, math), w = rounded_operand(w_in, math);
  if (use_onednn() && onednn::forward(x, w, bias, g, y)) return;
  const int64_t N = x.size(0), O = g.out_channels, K = g.col_rows(), P = g.out_volume();
  const int64_t in_sample = g.in_channels * g.in_volume(), plane = g.out_plane();
  const int64_t slab = planes_per_slab(g);
  Tensor col = g.is_pointwise() ? Tensor() : Tensor::empty({K * slab * plane});
  for (int64_t n = 0; n < N; ++n) {
    Tensor yn = at(y, n * O * P);
    if (g.is_pointwise()) {
      gemm_at(w, K, false, at(x, n * in_sample), P, false, yn, P, O, P, K, 0.0f);
      continue;
    }
    for (int64_t od0 = 0; od0 < g.out_size[0]; od0 += slab) {
      const int64_t od1 = std::min(od0 + slab, g.out_size[0]), cols = (od1 - od0) * plane;
      vol2col(x.data<float>() + n * in_sample, g, od0, od1, col.data<float>());
      gemm_at(w, K, false, col, cols, false, at(yn, od0 * plane), P, O, cols, K, 0.0f);
    }
  }
  if (!bias.defined()) return;
  const float* b = bias.data<float>();
  float* yp = y.data<float>();
  parallel_for(
      N * O,
      [&](int64_t r) {
        const float v = b[r % O];
        float* row = yp + r * P;
        for (int64_t p = 0; p < P; ++p) row[p] += v;
      },
      P);
}

void backward_data_all_taps(const Tensor& dy_in, const Tensor& w_in, const Conv3dGeometry& g, Tensor& dx,
                            ops::MathMode math) {
  const Tensor dy = rounded_operand(dy_in, math), w = rounded_operand(w_in, math);
  if (use_onednn() && onednn::backward_data(dy, w, g, dx)) return;
  const int64_t N = dy.size(0), O = g.out_channels, K = g.col_rows(), P = g.out_volume();
  const int64_t C = g.in_channels, H = g.in_size[1], W = g.in_size[2];
  const int64_t in_sample = C * g.in_volume(), plane = g.out_plane();
  const int64_t slab = planes_per_slab(g);
  if (g.is_pointwise()) {  // dx_n [C, P] = W^T [C, O] * dy_n [O, P]
    for (int64_t n = 0; n < N; ++n)
      gemm_at(w, K, true, at(dy, n * O * P), P, false, at(dx, n * in_sample), P, C, P, O, 0.0f);
    return;
  }
  Tensor dcol = Tensor::empty({K * slab * plane});
  float* dxp = dx.data<float>();
  std::fill(dxp, dxp + dx.numel(), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    float* dxn = dxp + n * in_sample;
    for (int64_t od0 = 0; od0 < g.out_size[0]; od0 += slab) {
      const int64_t od1 = std::min(od0 + slab, g.out_size[0]), cols = (od1 - od0) * plane;
      gemm_at(w, K, true, at(dy, n * O * P + od0 * plane), P, false, dcol, cols, K, cols, O, 0.0f);
      int64_t first = 0, last = -1;
      body::input_depths_of(g, od0, od1, &first, &last);
      if (last < first) continue;
      const int64_t depths = last - first + 1;
      const float* dc = dcol.data<float>();
      parallel_for(
          C * depths * H,
          [&](int64_t r) {  // one input row (c, id, ih) of W voxels
            const int64_t ih = r % H, id = first + (r / H) % depths, c = r / (H * depths);
            body::col2vol_row(dc, g, od0, od1, c, id, ih, dxn + ((c * g.in_size[0] + id) * H + ih) * W);
          },
          W * g.kernel_volume());
    }
  }
}

void backward_filter_all_taps(const Tensor& x_in, const Tensor& dy_in, const Conv3dGeometry& g, Tensor& dw,
                              ops::MathMode math) {
  const Tensor x = rounded_operand(x_in, math), dy = rounded_operand(dy_in, math);
  if (conv3d_filter_by_planes(g)) return one_channel::backward_filter(x, dy, g, dw);
  if (use_onednn() && onednn::backward_filter(x, dy, g, dw)) return;
  const int64_t N = x.size(0), O = g.out_channels, K = g.col_rows(), P = g.out_volume();
  const int64_t in_sample = g.in_channels * g.in_volume(), plane = g.out_plane();
  const int64_t group = conv3d_filter_samples_per_gemm(g, N);
  if (group > 1) {
    Tensor col = Tensor::empty({K * group * P}), dys = Tensor::empty({O * group * P});
    const float *xp = x.data<float>(), *dyp = dy.data<float>();
    float *c = col.data<float>(), *d = dys.data<float>();
    for (int64_t n0 = 0; n0 < N; n0 += group) {
      const int64_t samples = std::min(group, N - n0), cols = samples * P;
      parallel_for(
          K,
          [&](int64_t row) {
            for (int64_t j = 0; j < samples; ++j)
              body::vol2col_row(xp + (n0 + j) * in_sample, g, row, 0, g.out_size[0], c + row * cols + j * P);
          },
          cols);
      parallel_for(
          O,
          [&](int64_t o) {
            for (int64_t j = 0; j < samples; ++j) std::copy_n(dyp + ((n0 + j) * O + o) * P, P, d + o * cols + j * P);
          },
          cols);
      gemm_at(dys, cols, false, col, cols, true, dw, K, O, K, cols, 1.0f);
    }
    return;
  }
  const int64_t slab = planes_per_slab(g);
  Tensor col = g.is_pointwise() ? Tensor() : Tensor::empty({K * slab * plane});
  for (int64_t n = 0; n < N; ++n) {
    if (g.is_pointwise()) {  // dW [O, C] += dy_n [O, P] * x_n^T [P, C]
      gemm_at(at(dy, n * O * P), P, false, at(x, n * in_sample), P, true, dw, K, O, K, P, 1.0f);
      continue;
    }
    for (int64_t od0 = 0; od0 < g.out_size[0]; od0 += slab) {
      const int64_t od1 = std::min(od0 + slab, g.out_size[0]), cols = (od1 - od0) * plane;
      vol2col(x.data<float>() + n * in_sample, g, od0, od1, col.data<float>());
      gemm_at(at(dy, n * O * P + od0 * plane), P, false, col, cols, true, dw, K, O, K, cols, 1.0f);
    }
  }
}

void backward_all_taps(const Tensor& x_in, const Tensor& dy_in, const Tensor& w_in, const Conv3dGeometry& g, Tensor& dx,
                       Tensor& dw, ops::MathMode math, const std::function<void()>& between) {
  if (use_onednn() && !conv3d_filter_by_planes(g)) {
    const Tensor x = rounded_operand(x_in, math), dy = rounded_operand(dy_in, math), w = rounded_operand(w_in, math);
    if (onednn::backward(x, dy, w, g, dx.defined() ? &dx : nullptr, dw, between)) return;
  }
  if (dx.defined()) backward_data_all_taps(dy_in, w_in, g, dx, math);
  if (between) between();
  backward_filter_all_taps(x_in, dy_in, g, dw, math);
}

// The weights w [O, C, kd, kh, kw] of g on the taps t keeps, as a tensor of t.geometry's.
Tensor weights_on_taps(const Tensor& w, const Conv3dGeometry& g, const ops::ConvTaps& t) {
  Tensor out = Tensor::empty(ops::conv3d_weight_shape(t.geometry));
  strided_move(w, out, ops::conv3d_taps_box(g, t, true), LayoutMode::copy);
  return out;
}

// dw += dw_taps, the gradient on the taps t keeps (the others' is zero).
void add_taps(const Tensor& dw_taps, const Conv3dGeometry& g, const ops::ConvTaps& t, Tensor& dw) {
  strided_move(dw_taps, dw, ops::conv3d_taps_box(g, t, false), LayoutMode::add);
}

}  // namespace

// The entry points: each pass on the taps that reach the input (ops::conv3d_reaching_taps).
void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                    ops::MathMode math) {
  const ops::ConvTaps t = ops::conv3d_reaching_taps(g);
  if (t.all(g)) return forward_all_taps(x, w, bias, g, y, math);
  if (!t.none()) return forward_all_taps(x, weights_on_taps(w, g, t), bias, t.geometry, y, math);
  const int64_t O = g.out_channels, P = g.out_volume();  // every output voxel is padding alone
  float* yp = y.data<float>();
  for (int64_t r = 0; r < y.numel() / P; ++r)
    std::fill_n(yp + r * P, P, bias.defined() ? bias.data<float>()[r % O] : 0.0f);
}

void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx, ops::MathMode math) {
  const ops::ConvTaps t = ops::conv3d_reaching_taps(g);
  if (t.all(g)) return backward_data_all_taps(dy, w, g, dx, math);
  if (!t.none()) return backward_data_all_taps(dy, weights_on_taps(w, g, t), t.geometry, dx, math);
  std::fill_n(dx.data<float>(), dx.numel(), 0.0f);
}

void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw,
                            ops::MathMode math) {
  const ops::ConvTaps t = ops::conv3d_reaching_taps(g);
  if (t.all(g)) return backward_filter_all_taps(x, dy, g, dw, math);
  if (t.none()) return;
  Tensor dw_taps = Tensor::zeros(ops::conv3d_weight_shape(t.geometry));
  backward_filter_all_taps(x, dy, t.geometry, dw_taps, math);
  add_taps(dw_taps, g, t, dw);
}

void conv3d_backward(const Tensor& x, const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx,
                     Tensor& dw, ops::MathMode math, const std::function<void()>& between) {
  const ops::ConvTaps t = ops::conv3d_reaching_taps(g);
  if (t.all(g)) return backward_all_taps(x, dy, w, g, dx, dw, math, between);
  if (t.none()) {
    if (dx.defined()) std::fill_n(dx.data<float>(), dx.numel(), 0.0f);
    if (between) between();
    return;
  }
  const Tensor w_taps = weights_on_taps(w, g, t);
  Tensor dw_taps = Tensor::zeros(w_taps.shape());
  backward_all_taps(x, dy, w_taps, t.geometry, dx, dw_taps, math, between);
  add_taps(dw_taps, g, t, dw);
}

void conv3d_backward_bias(const Tensor& dy, Tensor& db) {
  const int64_t N = dy.size(0), O = dy.size(1), P = dy.numel() / (N * O);
  const float* d = dy.data<float>();
  float* out = db.data<float>();
  // One channel per iteration; samples then voxels in order, summed in double.
  parallel_for(
      O,
      [&](int64_t o) {
        double acc = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const float* row = d + (n * O + o) * P;
          for (int64_t p = 0; p < P; ++p) acc += double(row[p]);
        }
        out[o] += float(acc);
      },
      N * P);
}

}  // namespace gridnn::kernels::cpu
