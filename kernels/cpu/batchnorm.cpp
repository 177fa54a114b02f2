// CPU backend of kernels/batchnorm.h: loops over the bodies of kernels/batchnorm_bodies.h.
//
// The channel sums run one channel per OpenMP iteration. Within a channel the L lanes are
// interleaved (a block of L consecutive positions at a time, position k going to lane
// k mod L): each lane adds exactly the elements, in exactly the order, that CUDA thread l
// adds in kernels/cuda/batchnorm.cu, while the pass over memory stays contiguous. The
// lanes are then combined by the same pairwise tree.
#include "kernels/batchnorm.h"

#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {
namespace {

const float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* ptr(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Per channel c: fold(plane_base, k, a, b) adds element k of the plane at plane_base into
// lane accumulators a, b; then the tree; finish(c, a, b) stores the two sums.
template <class Fold, class Finish>
void channel_lanes(BatchNormGeometry g, Fold fold, Finish finish) {
  const int lanes = reduce_lanes(g.s);
  parallel_for(
      g.c,
      [&](int64_t c) {
        std::vector<double> a(size_t(lanes), 0.0), b(size_t(lanes), 0.0);
        for (int64_t n = 0; n < g.n; ++n) {
          const int64_t base = (n * g.c + c) * g.s;
          for (int64_t block = 0; block < g.s; block += lanes) {
            const int64_t width = g.s - block < lanes ? g.s - block : lanes;
            for (int64_t l = 0; l < width; ++l)
              fold(c, base + block + l, a[size_t(l)], b[size_t(l)]);
          }
        }
        for (int width = lanes / 2; width > 0; width /= 2)
          for (int lane = 0; lane < width; ++lane)
            body::bn_tree_step(a.data(), b.data(), lane, width);
        finish(c, a[0], b[0]);
      },
      g.n * g.s + lanes);
}

}  // namespace

void batchnorm_channel_sums(const Tensor& x, const Tensor& shift, BatchNormGeometry g,
                            Tensor& sums) {
  const float* k = ptr(shift);
  float* out = sums.data<float>();
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_channel_sums", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    channel_lanes(
        g,
        [&](int64_t c, int64_t i, double& a, double& b) {
          body::bn_stat_step(a, b, to_float(in[i]), k ? double(k[c]) : 0.0);
        },
        [&](int64_t c, double a, double b) {
          out[c] = float(a);
          out[g.c + c] = float(b);
        });
  });
}

void batchnorm_backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean,
                             const Tensor& invstd, BatchNormGeometry g, Tensor& sums) {
  const float* m = mean.data<float>();
  const float* is = invstd.data<float>();
  float* out = sums.data<float>();
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_backward_sums", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    channel_lanes(
        g,
        [&](int64_t c, int64_t i, double& a, double& b) {
          body::bn_grad_step(a, b, to_float(in[i]), to_float(d[i]), double(m[c]));
        },
        [&](int64_t c, double a, double b) {
          out[c] = float(a);
          out[g.c + c] = float(b * double(is[c]));
        });
  });
}

void batchnorm_moments(const Tensor& sums, const Tensor& shift, int64_t count, Tensor& mean,
                       Tensor& var) {
  const int64_t c = sums.size(1);
  for (int64_t i = 0; i < c; ++i)
    body::bn_moments_at(i, c, sums.data<float>(), ptr(shift), count, mean.data<float>(), ptr(var));
}

void batchnorm_invstd(const Tensor& var, double eps, Tensor& invstd) {
  for (int64_t i = 0; i < var.numel(); ++i)
    body::bn_invstd_at(i, var.data<float>(), eps, invstd.data<float>());
}

void batchnorm_update_running(const Tensor& mean, const Tensor& var, int64_t count, double momentum,
                              Tensor& running_mean, Tensor& running_var,
                              Tensor& num_batches_tracked) {
  for (int64_t i = 0; i < mean.numel(); ++i)
    body::bn_update_running_at(i, mean.data<float>(), var.data<float>(), count, momentum,
                               running_mean.data<float>(), running_var.data<float>());
  if (num_batches_tracked.defined()) *num_batches_tracked.data<int64_t>() += 1;
}

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& bias, BatchNormGeometry g, Tensor& y) {
  const float *m = mean.data<float>(), *is = invstd.data<float>(), *w = ptr(weight), *b = ptr(bias);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_normalize", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    parallel_for(x.numel(), [&](int64_t i) { body::bn_normalize_at(i, in, g, m, is, w, b, out); });
  });
}

void batchnorm_backward_input(const Tensor& x, const Tensor& dy, const Tensor& mean,
                              const Tensor& invstd, const Tensor& weight, const Tensor& sums,
                              int64_t count, bool training, BatchNormGeometry g, Tensor& dx) {
  const float *m = mean.data<float>(), *is = invstd.data<float>(), *w = ptr(weight), *s = ptr(sums);
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "batchnorm_backward_input", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(x.numel(), [&](int64_t i) {
      body::bn_backward_input_at(i, in, d, g, m, is, w, s, count, training, out);
    });
  });
}

}  // namespace gridnn::kernels::cpu
