// CPU backend of kernels/pool3d.h: OpenMP loops over the bodies of kernels/pool3d_bodies.h
// (one iteration per output element forward, per input element backward).
#include "kernels/pool3d.h"

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

void max_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y, Tensor& argmax) {
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "max_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    int64_t* idx = argmax.data<int64_t>();
    parallel_for(
        y.numel(), [&](int64_t o) { body::max_pool_at(o, in, g, out, idx); }, g.kd * g.kh * g.kw);
  });
}

void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dGeometry& g,
                         Tensor& dx) {
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "max_pool3d_backward", [&] {
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    const int64_t* idx = argmax.data<int64_t>();
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(
        dx.numel(), [&](int64_t i) { body::max_pool_backward_at(i, d, idx, g, out); }, 8);
  });
}

void avg_pool3d_forward(const Tensor& x, const Pool3dGeometry& g, Tensor& y) {
  GRIDNN_DISPATCH_FLOATING(x.dtype(), "avg_pool3d_forward", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x.raw());
    scalar_t* out = static_cast<scalar_t*>(y.raw());
    parallel_for(
        y.numel(), [&](int64_t o) { body::avg_pool_at(o, in, g, out); }, g.kd * g.kh * g.kw);
  });
}

void avg_pool3d_backward(const Tensor& dy, const Pool3dGeometry& g, Tensor& dx) {
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "avg_pool3d_backward", [&] {
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(
        dx.numel(), [&](int64_t i) { body::avg_pool_backward_at(i, d, g, out); }, 8);
  });
}

void global_avg_pool3d_backward(const Tensor& dy, int64_t volume, Tensor& dx) {
  GRIDNN_DISPATCH_FLOATING(dy.dtype(), "global_avg_pool3d_backward", [&] {
    const scalar_t* d = static_cast<const scalar_t*>(dy.raw());
    scalar_t* out = static_cast<scalar_t*>(dx.raw());
    parallel_for(dx.numel(),
                 [&](int64_t i) { body::global_avg_pool_backward_at(i, d, volume, out); });
  });
}

}  // namespace gridnn::kernels::cpu
