// Element types of a Tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/half.h"
#include "core/names.h"

namespace gridnn {

enum class DType : uint8_t { f32, f16, bf16, i32, i64 };
inline constexpr EnumName<DType> kDTypeNames[] = {
    {DType::f32, "f32"}, {DType::f16, "f16"}, {DType::bf16, "bf16"}, {DType::i32, "i32"}, {DType::i64, "i64"}};
constexpr EnumNames<DType> enum_names(DType) { return {"dtype", kDTypeNames}; }

size_t dtype_size(DType t);
// Short lower-case name for messages: "f32", "bf16", ...
constexpr const char* dtype_name(DType t) { return enum_name(t); }
// Name used in safetensors headers: "F32", "BF16", ...
const char* dtype_safetensors_name(DType t);
// Inverse of dtype_safetensors_name; false when the name is not one gridnn supports.
bool dtype_from_safetensors_name(const std::string& name, DType* out);
bool is_floating(DType t);

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};

}  // namespace gridnn

// Calls BODY with `scalar_t` bound to the C++ type of a floating dtype (f32, f16, bf16).
// Throws gridnn::Error naming OP for any other dtype.
#define GRIDNN_DISPATCH_FLOATING(DT, OP, ...)                          \
  [&] {                                                                \
    switch (DT) {                                                      \
      case ::gridnn::DType::f32: {                                     \
        using scalar_t = float;                                        \
        return __VA_ARGS__();                                          \
      }                                                                \
      case ::gridnn::DType::f16: {                                     \
        using scalar_t = ::gridnn::f16;                                \
        return __VA_ARGS__();                                          \
      }                                                                \
      case ::gridnn::DType::bf16: {                                    \
        using scalar_t = ::gridnn::bf16;                               \
        return __VA_ARGS__();                                          \
      }                                                                \
      default:                                                         \
        ::gridnn::throw_unsupported_dtype(OP, DT, "f32, f16 or bf16"); \
    }                                                                  \
  }()

// Same, for every dtype (used by fill, copy and cast).
#define GRIDNN_DISPATCH_ALL(DT, OP, ...)                      \
  [&] {                                                       \
    switch (DT) {                                             \
      case ::gridnn::DType::i32: {                            \
        using scalar_t = int32_t;                             \
        return __VA_ARGS__();                                 \
      }                                                       \
      case ::gridnn::DType::i64: {                            \
        using scalar_t = int64_t;                             \
        return __VA_ARGS__();                                 \
      }                                                       \
      default:                                                \
        return GRIDNN_DISPATCH_FLOATING(DT, OP, __VA_ARGS__); \
    }                                                         \
  }()

namespace gridnn {
[[noreturn]] void throw_unsupported_dtype(const char* op, DType got, const char* supported);
}
