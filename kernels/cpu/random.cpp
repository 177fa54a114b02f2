// CPU backend of kernels/random.h.
#include "kernels/cpu/parallel_for.h"
#include "kernels/random_bodies.h"

namespace gridnn::kernels::cpu {

void random(const RandomSpec& s, Tensor& t) {
  GRIDNN_DISPATCH_FLOATING(t.dtype(), "random", [&] {
    scalar_t* p = static_cast<scalar_t*>(t.raw());
    parallel_for(t.numel(), [&](int64_t i) { p[i] = from_float<scalar_t>(body::random_at(s, i)); });
  });
}

}  // namespace gridnn::kernels::cpu
