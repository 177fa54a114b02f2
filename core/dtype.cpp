#include "core/dtype.h"

#include "core/error.h"

namespace gridnn {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i64:
      return 8;
  }
  return 0;
}

namespace {
constexpr EnumName<DType> kSafetensorsSpelling[] = {
    {DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"}};
constexpr EnumNames<DType> kSafetensorsNames{"safetensors dtype", kSafetensorsSpelling};
}  // namespace

const char* dtype_safetensors_name(DType t) { return name_in(kSafetensorsNames, t); }

bool dtype_from_safetensors_name(const std::string& name, DType* out) {
  const std::optional<DType> t = find_in(kSafetensorsNames, name);
  if (t) *out = *t;
  return t.has_value();
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

void throw_unsupported_dtype(const char* op, DType got, const char* supported) {
  throw Error(std::string(op) + ": dtype " + dtype_name(got) + " is not supported; use " + supported);
}

}  // namespace gridnn
