// CUDA backend of kernels/conv3d.h through cuDNN's classic convolution API (Nd
// descriptors, NCDHW, fp32). Compiled only in cuDNN builds (kernels/conv3d.cmake); without
// cuDNN, kernels/conv3d.cpp turns a CUDA tensor into an error saying how to build with it.
//
// - One cuDNN handle per device, created on first use and bound to the device's compute
//   stream (core/cuda_context.h), so convolutions queue behind the other kernels.
// - A Plan per (device, batch, geometry, math mode) holds the descriptors and, once each
//   direction is first used, its algorithm and workspace size: chosen once, then cached.
//   Candidates come from cudnnGet*Algorithm_v7 (cuDNN's heuristic ranking, no timing runs);
//   the first one that is supported, deterministic (CUDNN_DETERMINISTIC: no atomics, the
//   same bits every run) and uses no tensor-core math is taken.
// - Precision: fp32 uses CUDNN_FMA_MATH. CUDNN_DEFAULT_MATH would let cuDNN pick TF32
//   tensor-core kernels for fp32 data on Ampere and newer GPUs, and TF32 must never be
//   silent (DESIGN §3); a TF32 mode would set CUDNN_TENSOR_OP_MATH when asked for.
// - The workspace is one device buffer per device from the caching allocator, grown when a
//   plan needs more and reused by every call (kernels run in stream order, so reuse is safe).
// - Parameter gradients accumulate: backward filter and bias run with beta = 1.
// Handles, plans and workspaces live for the whole process and are never destroyed (as the
// device contexts: tearing them down during static destruction, after the CUDA runtime or
// the caching allocator may be gone, is unsafe). Calls for one device are expected from one
// thread at a time (the handle is not meant for concurrent use).
#include <cudnn.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "kernels/conv3d.h"

namespace gridnn::kernels::cuda {
namespace {

// ---- handle and workspace, per device ------------------------------------------------

std::mutex registry_mutex;  // guards the maps below

cudnnHandle_t handle_for(int device) {
  static auto& handles = *new std::map<int, cudnnHandle_t>;  // never destroyed (see header)
  auto& ctx = ::gridnn::cuda::context(device);  // makes the device current
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  GRIDNN_CHECK_CUDNN(cudnnCreate(&h));
  GRIDNN_CHECK_CUDNN(cudnnSetStream(h, ctx.stream));
  handles[device] = h;
  return h;
}

// A device buffer of at least `bytes` (nullptr for 0), reused across calls.
void* workspace(int device, size_t bytes) {
  static auto& buffers = *new std::map<int, Tensor>;
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex);
  Tensor& buf = buffers[device];
  if (!buf.defined() || buf.nbytes() < bytes)
    buf = Tensor::empty({int64_t((bytes + 3) / 4)}, DType::f32, Device::cuda(device));
  return buf.raw();
}

// ---- descriptors ---------------------------------------------------------------------

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit TensorDesc(const std::array<int, 5>& dims) {
    GRIDNN_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    int strides[5];
    strides[4] = 1;
    for (int i = 3; i >= 0; --i) strides[i] = strides[i + 1] * dims[size_t(i + 1)];
    GRIDNN_CHECK_CUDNN(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, 5, dims.data(), strides));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const std::array<int, 5>& dims) {
    GRIDNN_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d));
    GRIDNN_CHECK_CUDNN(cudnnSetFilterNdDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, dims.data()));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv3dGeometry& g, cudnnMathType_t math) {
    GRIDNN_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    int pad[3], stride[3], dilation[3] = {1, 1, 1};
    for (int i = 0; i < 3; ++i) {
      pad[i] = int(g.padding[i]);
      stride[i] = int(g.stride[i]);
    }
    GRIDNN_CHECK_CUDNN(cudnnSetConvolutionNdDescriptor(d, 3, pad, stride, dilation,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

std::array<int, 5> dims5(int64_t a, int64_t b, const int64_t* s) {
  return {int(a), int(b), int(s[0]), int(s[1]), int(s[2])};
}

// ---- plans: descriptors and algorithms per shape -------------------------------------

struct Plan {
  Plan(int64_t n, const Conv3dGeometry& g, cudnnMathType_t math)
      : x(dims5(n, g.in_channels, g.in_size)),
        y(dims5(n, g.out_channels, g.out_size)),
        bias({1, int(g.out_channels), 1, 1, 1}),
        w(dims5(g.out_channels, g.in_channels, g.kernel)),
        conv(g, math) {}
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

constexpr cudnnMathType_t kFp32Math = CUDNN_FMA_MATH;

using PlanKey = std::array<int64_t, 17>;

Plan& plan_for(int device, int64_t n, const Conv3dGeometry& g, cudnnMathType_t math) {
  static auto& plans = *new std::map<PlanKey, std::unique_ptr<Plan>>;
  PlanKey key = {device, n, g.in_channels, g.out_channels, int64_t(math)};
  for (int i = 0; i < 3; ++i) {
    key[size_t(5 + i)] = g.kernel[i];
    key[size_t(8 + i)] = g.stride[i];
    key[size_t(11 + i)] = g.padding[i];
    key[size_t(14 + i)] = g.in_size[i];
  }
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::unique_ptr<Plan>& p = plans[key];
  if (!p) p = std::make_unique<Plan>(n, g, math);
  return *p;
}

bool acceptable(cudnnStatus_t status, cudnnDeterminism_t determinism, cudnnMathType_t math) {
  return status == CUDNN_STATUS_SUCCESS && determinism == CUDNN_DETERMINISTIC &&
         (math == CUDNN_FMA_MATH || math == CUDNN_DEFAULT_MATH);
}

[[noreturn]] void no_algorithm(const char* direction, int64_t n, const Conv3dGeometry& g) {
  throw Error(std::string("conv3d (cuDNN): no deterministic fp32 ") + direction +
              " algorithm for batch " + std::to_string(n) + ", " + ops::str(g) +
              "; try another batch size or padding, or run this layer on the cpu");
}

// The first acceptable candidate of cuDNN's ranking whose workspace size cuDNN reports.
template <class Perf, class Algo, class GetAll, class GetBytes>
void choose(const char* direction, int64_t n, const Conv3dGeometry& g, int max_count, GetAll get_all,
            GetBytes get_bytes, Algo* algo, size_t* bytes) {
  std::unique_ptr<Perf[]> perf(new Perf[size_t(max_count)]);
  int returned = 0;
  GRIDNN_CHECK_CUDNN(get_all(max_count, &returned, perf.get()));
  for (int i = 0; i < returned; ++i) {
    if (!acceptable(perf[i].status, perf[i].determinism, perf[i].mathType)) continue;
    size_t size = 0;
    if (get_bytes(perf[i].algo, &size) != CUDNN_STATUS_SUCCESS) continue;
    *algo = perf[i].algo;
    *bytes = size;
    return;
  }
  no_algorithm(direction, n, g);
}

void ensure_forward(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.have_fwd) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
  choose<cudnnConvolutionFwdAlgoPerf_t>(
      "forward", n, g, count,
      [&](int req, int* ret, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.d, p.w.d, p.conv.d, p.y.d, req, ret, perf);
      },
      [&](cudnnConvolutionFwdAlgo_t a, size_t* size) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, p.x.d, p.w.d, p.conv.d, p.y.d, a, size);
      },
      &p.fwd, &p.fwd_bytes);
  p.have_fwd = true;
}

void ensure_backward_data(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.have_bwd_data) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
  choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      "backward-data", n, g, count,
      [&](int req, int* ret, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.d, p.y.d, p.conv.d, p.x.d, req, ret, perf);
      },
      [&](cudnnConvolutionBwdDataAlgo_t a, size_t* size) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.d, p.y.d, p.conv.d, p.x.d, a, size);
      },
      &p.bwd_data, &p.bwd_data_bytes);
  p.have_bwd_data = true;
}

void ensure_backward_filter(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.have_bwd_filter) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
  choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      "backward-filter", n, g, count,
      [&](int req, int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x.d, p.y.d, p.conv.d, p.w.d, req, ret, perf);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* size) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.d, p.y.d, p.conv.d, p.w.d, a, size);
      },
      &p.bwd_filter, &p.bwd_filter_bytes);
  p.have_bwd_filter = true;
}

const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g,
                    Tensor& y) {
  const int device = x.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, x.size(0), g, kFp32Math);
  ensure_forward(h, p, x.size(0), g);
  void* ws = workspace(device, p.fwd_bytes);
  GRIDNN_CHECK_CUDNN(cudnnConvolutionForward(h, &kOne, p.x.d, x.raw(), p.w.d, w.raw(), p.conv.d, p.fwd,
                                             ws, p.fwd_bytes, &kZero, p.y.d, y.raw()));
  if (bias.defined())  // y += bias, broadcast over N, D, H, W
    GRIDNN_CHECK_CUDNN(cudnnAddTensor(h, &kOne, p.bias.d, bias.raw(), &kOne, p.y.d, y.raw()));
}

void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx) {
  const int device = dy.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, dy.size(0), g, kFp32Math);
  ensure_backward_data(h, p, dy.size(0), g);
  void* ws = workspace(device, p.bwd_data_bytes);
  GRIDNN_CHECK_CUDNN(cudnnConvolutionBackwardData(h, &kOne, p.w.d, w.raw(), p.y.d, dy.raw(), p.conv.d,
                                                  p.bwd_data, ws, p.bwd_data_bytes, &kZero, p.x.d,
                                                  dx.raw()));
}

void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw) {
  const int device = x.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, x.size(0), g, kFp32Math);
  ensure_backward_filter(h, p, x.size(0), g);
  void* ws = workspace(device, p.bwd_filter_bytes);
  GRIDNN_CHECK_CUDNN(cudnnConvolutionBackwardFilter(h, &kOne, p.x.d, x.raw(), p.y.d, dy.raw(), p.conv.d,
                                                    p.bwd_filter, ws, p.bwd_filter_bytes, &kOne, p.w.d,
                                                    dw.raw()));  // beta = 1: dw accumulates
}

void conv3d_backward_bias(const Tensor& dy, Tensor& db) {
  cudnnHandle_t h = handle_for(dy.device().index);
  int64_t spatial[3] = {dy.size(2), dy.size(3), dy.size(4)};
  const int64_t ones[3] = {1, 1, 1};
  TensorDesc dy_desc(dims5(dy.size(0), dy.size(1), spatial)), db_desc(dims5(1, dy.size(1), ones));
  GRIDNN_CHECK_CUDNN(cudnnConvolutionBackwardBias(h, &kOne, dy_desc.d, dy.raw(), &kOne, db_desc.d,
                                                  db.raw()));  // beta = 1: db accumulates
}

}  // namespace gridnn::kernels::cuda
