// CPU backend of kernels/batchnorm.h: loops over the bodies of kernels/batchnorm_bodies.h.
//
// Channel sums: the segments of kernels/batchnorm_bodies.h are split statically over the
// OpenMP threads (in memory order, so each thread streams one contiguous range). Within a
// segment the L lanes are interleaved, a block of L consecutive positions at a time,
// position k of the segment going to lane k mod L: each lane adds exactly the positions, in
// exactly the order, that CUDA thread l adds in kernels/cuda/batchnorm.cu, and the loop over
// a block's lanes vectorizes. The segments' sums go to a scratch buffer (one per calling
// thread, grown as needed); the calling thread then folds them per channel in the fixed
// order. Nothing depends on the thread count.
//
// Per-element steps: the flat range is split into one contiguous part per thread; a part
// walks its runs of whole or partial planes, taking the channel's coefficients once per run
// and evaluating the per-element body in a loop over contiguous positions, which vectorizes.
#include "kernels/batchnorm.h"

#include <omp.h>

#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {
namespace {

const float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* ptr(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// ---- channel sums ------------------------------------------------------------------------

// Per-segment partial sums, [a of every segment; b of every segment]. Kept per calling
// thread and only ever grown, so a training step allocates nothing here after its first.
double* segment_scratch(int64_t segments) {
  thread_local std::vector<double> scratch;
  if (scratch.size() < size_t(2 * segments)) scratch.resize(size_t(2 * segments));
  return scratch.data();
}

// The lanes of one segment, interleaved: step(i, a, b) adds position i into lane
// accumulators a, b. Then the tree; returns the segment's two sums in *a, *b.
template <class Step>
void segment_sums(BatchNormSegment seg, int lanes, Step step, double* a, double* b) {
  double la[kReduceLanes], lb[kReduceLanes];
  for (int l = 0; l < lanes; ++l) la[l] = lb[l] = 0.0;
  int64_t block = seg.begin;
  for (; block + lanes <= seg.end; block += lanes)
    for (int l = 0; l < lanes; ++l) step(block + l, la[l], lb[l]);
  for (int l = 0; block + l < seg.end; ++l) step(block + l, la[l], lb[l]);
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) body::bn_tree_step(la, lb, lane, width);
  *a = la[0];
  *b = lb[0];
}

// Every channel's sums: segment_step(seg) returns the Step of segment_sums for segment
// seg; the segments run in parallel, the fold per channel after them. invstd: as
// body::bn_store_sums.
template <class SegmentStep>
void channel_sums(BatchNormGeometry g, SegmentStep segment_step, const float* invstd, float* sums) {
  const int64_t segments = bn_segment_count(g);
  const int lanes = bn_lanes(g.s);
  double* seg_a = segment_scratch(segments);
  double* seg_b = seg_a + segments;
  parallel_for(
      segments,
      [&](int64_t i) {
        const BatchNormSegment seg = bn_segment(g, i);
        segment_sums(seg, lanes, segment_step(seg), &seg_a[i], &seg_b[i]);
      },
      g.s < kBatchNormSegment ? g.s : kBatchNormSegment);
  for (int64_t c = 0; c < g.c; ++c) {
    double a, b;
    body::bn_fold_channel(seg_a, seg_b, g, c, &a, &b);
    body::bn_store_sums(c, g.c, a, b, invstd, sums);
  }
}

// ---- per-element steps -------------------------------------------------------------------

// run(c, begin, end) for runs of flat positions [begin, end) within one plane of channel
// c, covering the input once. The split (one contiguous part per thread) does not affect
// any element's result.
template <class Run>
void for_each_plane_run(BatchNormGeometry g, Run run) {
  const int64_t total = g.n * g.c * g.s;
  if (total == 0) return;
  const int64_t parts = total < kParallelGrain ? 1 : omp_get_max_threads();
  parallel_for(
      parts,
      [&](int64_t part) {
        const int64_t end = total * (part + 1) / parts;
        for (int64_t i = total * part / parts; i < end;) {
          const int64_t plane = i / g.s;
          const int64_t stop = (plane + 1) * g.s < end ? (plane + 1) * g.s : end;
          run(plane % g.c, i, stop);
          i = stop;
        }
      },
      total / parts);
}

}  // namespace

// ---- forward and backward sums -------------------------------------------------------------

void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, BatchNormGeometry g, Tensor& sums) {
  const float* k = ptr(shift);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_channel_sums", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    channel_sums(
        g,
        [&](BatchNormSegment seg) {
          const double s = k ? double(k[seg.channel]) : 0.0;
          return [in, s](int64_t i, double& a, double& b) { body::bn_stat_step(a, b, to_float(in[i]), s); };
        },
        nullptr, sums.data<float>());
  });
}

void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                             const BnBackwardGate& gate, BatchNormGeometry g, Tensor& sums) {
  const float *m = mean.data<float>(), *is = invstd.data<float>(), *w = ptr(gate.weight), *b = ptr(gate.bias);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_backward_sums", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    // dy through the gate (body::bn_gated_dy), the gate a constant of each instance so that
    // both loops vectorize.
    const auto run = [&](auto gated) {
      channel_sums(
          g,
          [&](BatchNormSegment seg) {
            const double mc = double(m[seg.channel]);
            const body::BnNormalizeCoeffs k = body::bn_normalize_coeffs(seg.channel, m, is, w, b);
            return [in, d, mc, k](int64_t i, double& sa, double& sb) {
              const float xv = to_float(in[i]), dv = to_float(d[i]);
              body::bn_grad_step(sa, sb, xv, decltype(gated)::value ? body::bn_relu_gate<scalar_t>(xv, dv, k) : dv, mc);
            };
          },
          is, sums.data<float>());
    };
    if (gate.activation == BnActivation::relu)
      run(std::true_type{});
    else
      run(std::false_type{});
  });
}

void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean, Tensor& var) {
  const int64_t c = sums.size(1);
  for (int64_t i = 0; i < c; ++i)
    body::bn_moments_at(i, c, sums.data<float>(), ptr(shift), count, mean.data<float>(), ptr(var));
}

void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd) {
  for (int64_t i = 0; i < var.numel(); ++i) body::bn_invstd_at(i, var.data<float>(), eps, invstd.data<float>());
}

void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked) {
  for (int64_t i = 0; i < mean.numel(); ++i)
    body::bn_update_running_at(i, mean.data<float>(), var.data<float>(), count, momentum, running_mean.data<float>(),
                               running_var.data<float>());
  if (num_batches_tracked.defined()) *num_batches_tracked.data<int64_t>() += 1;
}

// ---- forward and backward per element ------------------------------------------------------

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& bias, BnActivation activation, BatchNormGeometry g, Tensor& y) {
  const float *m = mean.data<float>(), *is = invstd.data<float>(), *w = ptr(weight), *b = ptr(bias);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_normalize", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    for_each_plane_run(g, [&](int64_t c, int64_t begin, int64_t end) {
      const body::BnNormalizeCoeffs k = body::bn_normalize_coeffs(c, m, is, w, b);
      if (activation == BnActivation::none)
        for (int64_t i = begin; i < end; ++i)
          out[i] = body::bn_output<scalar_t>(to_float(in[i]), k, BnActivation::none);
      else
        for (int64_t i = begin; i < end; ++i)
          out[i] = body::bn_output<scalar_t>(to_float(in[i]), k, BnActivation::relu);
    });
  });
}

void batchnorm_relu_gate(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, BatchNormGeometry g, Tensor& gated) {
  const float *m = mean.data<float>(), *is = invstd.data<float>(), *w = ptr(weight), *b = ptr(bias);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_relu_gate", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(gated.raw());
    for_each_plane_run(g, [&](int64_t c, int64_t begin, int64_t end) {
      const body::BnNormalizeCoeffs k = body::bn_normalize_coeffs(c, m, is, w, b);
      for (int64_t i = begin; i < end; ++i)
        out[i] = from_float<scalar_t>(body::bn_relu_gate<scalar_t>(to_float(in[i]), to_float(d[i]), k));
    });
  });
}

void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& sums, int64_t count, bool training,
                              const BnBackwardGate& gate, BatchNormGeometry g, Tensor& dx) {
  const float *m = mean.data<float>(), *is = invstd.data<float>(), *w = ptr(weight), *s = ptr(sums);
  const float *gw = ptr(gate.weight), *gb = ptr(gate.bias);
  const bool relu = gate.activation == BnActivation::relu;
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_backward_input", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    for_each_plane_run(g, [&](int64_t c, int64_t begin, int64_t end) {
      const body::BnInputGradCoeffs k = body::bn_input_grad_coeffs(c, g.c, m, is, w, s, count, training);
      const body::BnNormalizeCoeffs kg = body::bn_normalize_coeffs(c, m, is, gw, gb);
      // dy through the gate (body::bn_gated_dy), one loop per case so that each vectorizes.
      const auto dy_at = [&](int64_t i, float xv, auto gated) {
        return gated ? body::bn_relu_gate<scalar_t>(xv, to_float(d[i]), kg) : to_float(d[i]);
      };
      const auto run = [&](auto gated) {
        if (training)
          for (int64_t i = begin; i < end; ++i) {
            const float xv = to_float(in[i]);
            out[i] = from_float<scalar_t>(body::bn_input_grad_training(xv, dy_at(i, xv, gated), k));
          }
        else
          for (int64_t i = begin; i < end; ++i)
            out[i] = from_float<scalar_t>(body::bn_input_grad_eval(dy_at(i, to_float(in[i]), gated), k));
      };
      if (relu)
        run(std::true_type{});
      else
        run(std::false_type{});
    });
  });
}

}  // namespace gridnn::kernels::cpu
