// CPU backend of kernels/dropout.h: a loop over the shared element body.
#include "kernels/dropout.h"

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

void dropout(const DropoutSpec& s, const Tensor& in, Tensor& out) {
  GRIDNN_DISPATCH_FLOATING(in.dtype(), "dropout", [&] {
    const scalar_t* pi = static_cast<const scalar_t*>(in.raw());
    scalar_t* po = static_cast<scalar_t*>(out.raw());
    parallel_for(
        in.numel(), [&](int64_t i) { body::dropout_at(s, pi, po, i); }, 16);
  });
}

}  // namespace gridnn::kernels::cpu
