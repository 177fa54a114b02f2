#include "test/support/random_tensor.h"

#include <cmath>

#include "core/philox.h"

namespace gridnn::test {

namespace {
template <class T>
T from_uniform(float v) {
  if constexpr (std::is_integral_v<T>)
    return T(std::floor(v));
  else
    return from_float<T>(v);
}
}  // namespace

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  const uint64_t stream = philox_stream_id("test::random_tensor");
  GRIDNN_DISPATCH_ALL(dtype, "random_tensor", [&] {
    scalar_t* p = static_cast<scalar_t*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = lo + (hi - lo) * philox_uniform(seed, stream, uint64_t(i));
      p[i] = from_uniform<scalar_t>(v);
    }
  });
  return t;
}

}  // namespace gridnn::test
