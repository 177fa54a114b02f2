// CUDA backend of kernels/optim.h: grid-stride launches over the bodies the CPU backend
// loops over (compiled with -fmad=false, so both agree bit for bit). One launch per
// parameter, or for the list forms one per kListTensors parameters: their pointers go in the
// kernel's arguments, and each thread walks the parameters' concatenated elements.
#include <array>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/optim.h"

namespace gridnn::kernels::cuda {
namespace {

// Parameters per launch of a list form: 48 entries of four pointers and an end, 1.9 KB of
// kernel arguments (under the 4 KB every architecture takes). The list is a __grid_constant__
// argument: threads index it where it is, in the parameter bank, by the language's guarantee
// rather than the optimizer's choice (a by-value argument taken by reference may be copied to
// local memory first; nvcc 13.0 for sm_90 did not, with or without the qualifier).
constexpr int kListTensors = 48;

// Up to kListTensors parameters' tensors; `end[t]`: the elements of entries 0..t together.
template <int kPointers>
struct TensorList {
  float* ptr[kListTensors][kPointers];
  int64_t end[kListTensors];
  int count;
};

// Calls at(entry's pointers, i) for every element i of every entry. A thread's elements
// only increase, so the entry it is in only moves forward.
template <int kPointers, class At>
__device__ void for_each_list_element(const TensorList<kPointers>& list, At at) {
  const int64_t total = list.end[list.count - 1];
  int t = 0;
  for (int64_t i = detail::grid_first(); i < total; i += detail::grid_stride()) {
    while (i >= list.end[t]) ++t;
    at(list.ptr[t], i - (t > 0 ? list.end[t - 1] : 0));
  }
}

__global__ void sgd_list_kernel(SgdConstants s, const __grid_constant__ TensorList<3> list) {
  for_each_list_element(list, [&](float* const* p, int64_t i) { body::sgd_at(s, p[0], p[1], p[2], i); });
}

__global__ void adam_list_kernel(AdamConstants s, const __grid_constant__ TensorList<4> list) {
  for_each_list_element(list, [&](float* const* p, int64_t i) { body::adam_at(s, p[0], p[1], p[2], p[3], i); });
}

// Launches `launch(list, elements)` once per kListTensors entries that have elements;
// pointers(entry) gives an entry's kPointers pointers (a null one is never read).
template <int kPointers, class Entry, class Pointers, class Launch>
void for_each_list_launch(const std::vector<Entry>& entries, Pointers pointers, Launch launch) {
  TensorList<kPointers> list{};
  const auto flush = [&] {
    if (list.count > 0) launch(list, list.end[list.count - 1]);
    list = TensorList<kPointers>{};
  };
  for (const Entry& e : entries) {
    const int64_t n = e.param->numel();
    if (n == 0) continue;
    const std::array<float*, kPointers> p = pointers(e);
    for (int k = 0; k < kPointers; ++k) list.ptr[list.count][k] = p[size_t(k)];
    list.end[list.count] = (list.count > 0 ? list.end[list.count - 1] : 0) + n;
    if (++list.count == kListTensors) flush();
  }
  flush();
}

__global__ void sgd_kernel(SgdConstants s, float* param, const float* grad, float* buf, int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride()) body::sgd_at(s, param, grad, buf, i);
}

__global__ void adam_kernel(AdamConstants s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            int64_t n) {
  for (int64_t i = detail::grid_first(); i < n; i += detail::grid_stride())
    body::adam_at(s, param, grad, exp_avg, exp_avg_sq, i);
}

}  // namespace

void sgd_update(const SgdConstants& s, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  const int64_t n = param.numel();
  auto& ctx = detail::context_of(param);
  float* buf = s.momentum != 0.0f ? momentum_buffer.data<float>() : nullptr;
  sgd_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(s, param.data<float>(), grad.data<float>(),
                                                                            buf, n);
  GRIDNN_CHECK_LAUNCH("sgd_kernel");
}

void adam_update(const AdamConstants& s, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq) {
  const int64_t n = param.numel();
  auto& ctx = detail::context_of(param);
  adam_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(
      s, param.data<float>(), grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(), n);
  GRIDNN_CHECK_LAUNCH("adam_kernel");
}

void sgd_update(const SgdConstants& s, const std::vector<ops::SgdTensors>& tensors) {
  auto& ctx = detail::context_of(*tensors.front().param);
  for_each_list_launch<3>(
      tensors,
      [&](const ops::SgdTensors& t) {
        float* buf = s.momentum != 0.0f ? t.momentum_buffer->data<float>() : nullptr;
        return std::array<float*, 3>{t.param->data<float>(), const_cast<float*>(t.grad->data<float>()), buf};
      },
      [&](const TensorList<3>& list, int64_t n) {
        sgd_list_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(s, list);
        GRIDNN_CHECK_LAUNCH("sgd_list_kernel");
      });
}

void adam_update(const AdamConstants& s, const std::vector<ops::AdamTensors>& tensors) {
  auto& ctx = detail::context_of(*tensors.front().param);
  for_each_list_launch<4>(
      tensors,
      [](const ops::AdamTensors& t) {
        return std::array<float*, 4>{t.param->data<float>(), const_cast<float*>(t.grad->data<float>()),
                                     t.exp_avg->data<float>(), t.exp_avg_sq->data<float>()};
      },
      [&](const TensorList<4>& list, int64_t n) {
        adam_list_kernel<<<detail::grid_for(ctx, n), detail::kThreads, 0, ctx.stream>>>(s, list);
        GRIDNN_CHECK_LAUNCH("adam_list_kernel");
      });
}

}  // namespace gridnn::kernels::cuda
