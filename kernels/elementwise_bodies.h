// Element bodies, written once for host and device (docs/design.md §3). The CPU backend loops
// over them with OpenMP; the CUDA backend launches them. Every body computes in float
// whatever the storage type, so f16/bf16 get fp32 arithmetic.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/hd.h"

namespace gridnn::kernels {

enum class UnaryOp { scale, relu };
enum class BinaryOp { add, mul, axpy, relu_backward };

namespace body {

struct Scale {  // x * alpha
  float alpha;
  GRIDNN_HD float operator()(float x) const { return x * alpha; }
};
struct Relu {  // max(x, 0); NaN propagates as in PyTorch
  GRIDNN_HD float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};
struct Add {
  GRIDNN_HD float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  GRIDNN_HD float operator()(float a, float b) const { return a * b; }
};
struct Axpy {  // (x, y) -> y + alpha * x
  float alpha;
  GRIDNN_HD float operator()(float x, float y) const { return y + alpha * x; }
};
struct ReluBackward {  // (x, dy) -> dy where x > 0, else 0 (subgradient 0 at the kink)
  GRIDNN_HD float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};

// Element i of a unary / binary map over storage type T.
template <class T, class F>
GRIDNN_HD GRIDNN_INLINE void map1_at(int64_t i, const T* x, T* out, F f) {
  out[i] = from_float<T>(f(to_float(x[i])));
}
template <class T, class F>
GRIDNN_HD GRIDNN_INLINE void map2_at(int64_t i, const T* a, const T* b, T* out, F f) {
  out[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
}

// Value conversion for cast: through float for 16-bit types, direct otherwise.
template <class Dst, class Src>
GRIDNN_HD GRIDNN_INLINE Dst convert(Src v) {
  constexpr bool src_half = std::is_same_v<Src, f16> || std::is_same_v<Src, bf16>;
  constexpr bool dst_half = std::is_same_v<Dst, f16> || std::is_same_v<Dst, bf16>;
  if constexpr (src_half && dst_half) {
    return Dst(float(v));
  } else if constexpr (src_half) {
    return static_cast<Dst>(float(v));
  } else if constexpr (dst_half) {
    return Dst(static_cast<float>(v));
  } else {
    return static_cast<Dst>(v);
  }
}

}  // namespace body

// Calls fn(body) with the functor for `op` (used by both backends).
template <class Fn>
void visit_unary(UnaryOp op, float param, Fn&& fn) {
  switch (op) {
    case UnaryOp::scale:
      return fn(body::Scale{param});
    case UnaryOp::relu:
      return fn(body::Relu{});
  }
}

template <class Fn>
void visit_binary(BinaryOp op, float param, Fn&& fn) {
  switch (op) {
    case BinaryOp::add:
      return fn(body::Add{});
    case BinaryOp::mul:
      return fn(body::Mul{});
    case BinaryOp::axpy:
      return fn(body::Axpy{param});
    case BinaryOp::relu_backward:
      return fn(body::ReluBackward{});
  }
}

}  // namespace gridnn::kernels
