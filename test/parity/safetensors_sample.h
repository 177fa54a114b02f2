// The safetensors interop sample: a few small tensors whose values follow simple
// formulas, one per dtype plus a 0-d scalar, a 5-d tensor and an empty tensor.
//
// The same formulas live in make_safetensors_fixture.py (SAMPLE), which writes them with
// PyTorch; test_safetensors reads that file and compares it with these tensors, and
// write_safetensors_sample writes these tensors for check_torch_load.py to read back.
// Every value is exact in its dtype, so both sides agree bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"

namespace gridnn::parity {

struct SampleTensor {
  const char* name;
  DType dtype;
  std::vector<int64_t> dims;
  double (*value)(int64_t i);  // value of flat (row-major) element i
};

inline const std::vector<SampleTensor>& sample_tensors() {
  static const std::vector<SampleTensor> sample = {
      {"f32.matrix", DType::f32, {2, 3}, [](int64_t i) { return double(i) * 0.5 - 1.0; }},
      {"f16.vector", DType::f16, {7}, [](int64_t i) { return double(i - 3) * 0.25; }},
      {"bf16.cube", DType::bf16, {2, 2, 3}, [](int64_t i) { return double(i - 6) * 0.125; }},
      {"i32.vector", DType::i32, {5}, [](int64_t i) { return double((i - 2) * 1000003); }},
      {"i64.vector", DType::i64, {4}, [](int64_t i) { return double((i - 1) * (int64_t(1) << 40) + i); }},
      {"scalar", DType::f32, {}, [](int64_t) { return 3.25; }},
      {"five_d", DType::f32, {1, 2, 1, 3, 2}, [](int64_t i) { return double(i) * 0.25 + 100.0; }},
      {"empty", DType::f32, {0, 3}, [](int64_t) { return 0.0; }},
  };
  return sample;
}

inline std::map<std::string, std::string> sample_metadata() {
  return {{"format", "pt"}, {"producer", "gridnn safetensors sample"}};
}

template <class T>
void fill_by_formula(Tensor& t, double (*value)(int64_t)) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_integral_v<T>)
      p[i] = T(value(i));
    else
      p[i] = T(float(value(i)));
  }
}

inline Tensor make_sample_tensor(const SampleTensor& spec) {
  Tensor t = Tensor::empty(Shape(spec.dims), spec.dtype);
  GRIDNN_DISPATCH_ALL(spec.dtype, "make_sample_tensor", [&] { fill_by_formula<scalar_t>(t, spec.value); });
  return t;
}

inline NamedTensors make_sample() {
  NamedTensors tensors;
  for (const SampleTensor& spec : sample_tensors()) tensors.emplace_back(spec.name, make_sample_tensor(spec));
  return tensors;
}

}  // namespace gridnn::parity
