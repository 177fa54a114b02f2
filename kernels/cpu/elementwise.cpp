// CPU backend of kernels/elementwise.h: OpenMP loops over the shared element bodies.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {
namespace {

template <class Src>
void cast_from(const Src* in, Tensor& dst) {
  GRIDNN_DISPATCH_ALL(dst.dtype(), "cast", [&] {
    scalar_t* out = static_cast<scalar_t*>(dst.raw());
    parallel_for(dst.numel(), [&](int64_t i) { out[i] = body::convert<scalar_t>(in[i]); });
  });
}

template <class T>
bool all_zero_bits(const T& v) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  return std::all_of(bytes, bytes + sizeof(T), [](unsigned char b) { return b == 0; });
}

}  // namespace

// A value of all zero bits (zero_grad's) is set by memset, a block at a time: the C library's
// stores skip reading the lines first, 1.5x the rate of a store loop over 16-84 MB
// (bench/RESULTS.md).
void fill(Tensor& t, double value) {
  GRIDNN_DISPATCH_ALL(t.dtype(), "fill", [&] {
    const scalar_t v = body::convert<scalar_t>(value);
    scalar_t* p = static_cast<scalar_t*>(t.raw());
    const int64_t n = t.numel();
    if (!all_zero_bits(v)) {
      parallel_for(n, [&](int64_t i) { p[i] = v; });
      return;
    }
    constexpr int64_t kBlock = int64_t(1) << 16;  // elements per memset
    parallel_for((n + kBlock - 1) / kBlock,
                 [&](int64_t b) {
                   std::memset(static_cast<void*>(p + b * kBlock), 0,
                               sizeof(scalar_t) * size_t(std::min(kBlock, n - b * kBlock)));
                 },
                 kBlock);
  });
}

void cast(const Tensor& src, Tensor& dst) {
  GRIDNN_DISPATCH_ALL(src.dtype(), "cast", [&] { cast_from(static_cast<const scalar_t*>(src.raw()), dst); });
}

void unary(UnaryOp op, float param, const Tensor& x, Tensor& out) {
  visit_unary(op, param, [&](auto f) {
    GRIDNN_DISPATCH_FLOATING(x.dtype(), "unary", [&] {
      const scalar_t* in = static_cast<const scalar_t*>(x.raw());
      scalar_t* o = static_cast<scalar_t*>(out.raw());
      parallel_for(x.numel(), [&](int64_t i) { body::map1_at(i, in, o, f); });
    });
  });
}

void binary(BinaryOp op, float param, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_binary(op, param, [&](auto f) {
    GRIDNN_DISPATCH_FLOATING(a.dtype(), "binary", [&] {
      const scalar_t* pa = static_cast<const scalar_t*>(a.raw());
      const scalar_t* pb = static_cast<const scalar_t*>(b.raw());
      scalar_t* o = static_cast<scalar_t*>(out.raw());
      parallel_for(a.numel(), [&](int64_t i) { body::map2_at(i, pa, pb, o, f); });
    });
  });
}

}  // namespace gridnn::kernels::cpu
