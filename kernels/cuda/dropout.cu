// CUDA backend of kernels/dropout.h: a grid-stride loop over body::dropout_at, the body
// the CPU backend loops over, so both draw the same mask.
#include "kernels/cuda/launch.cuh"
#include "kernels/dropout.h"

namespace gridnn::kernels::cuda {
namespace {

template <class T>
__global__ void dropout_kernel(DropoutSpec s, const T* in, T* out, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) body::dropout_at(s, in, out, i);
}

}  // namespace

void dropout(const DropoutSpec& s, const Tensor& in, Tensor& out) {
  const int64_t n = in.numel();
  auto& ctx = detail::context_of(in);
  GRIDNN_DISPATCH_FLOATING(in.dtype(), "dropout", [&] {
    dropout_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
        s, static_cast<const scalar_t*>(in.raw()), static_cast<scalar_t*>(out.raw()), n);
    GRIDNN_CHECK_LAUNCH("dropout_kernel");
  });
}

}  // namespace gridnn::kernels::cuda
