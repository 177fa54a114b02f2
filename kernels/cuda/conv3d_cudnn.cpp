// CUDA backend of kernels/conv3d.h through cuDNN's classic convolution API (Nd
// descriptors, NCDHW; fp32 tensors, computed in the math mode asked for). Compiled only in
// cuDNN builds (kernels/CMakeLists.txt); without cuDNN, kernels/conv3d.cpp turns a CUDA
// tensor into an error saying how to build with it.
//
// - One cuDNN handle per device, created on first use and bound to the device's compute
//   stream (core/cuda_context.h), so convolutions queue behind the other kernels.
// - A Plan per (device, batch, geometry, math mode) holds the descriptors and, once each
//   direction is first used, its algorithm and workspace size: chosen once, then cached.
//   Candidates come from cudnnGet*Algorithm_v7 (cuDNN's heuristic ranking, no timing runs);
//   the first one that is supported, deterministic (CUDNN_DETERMINISTIC: no atomics, the
//   same bits every run) and of an allowed math type is taken.
// - Each direction (forward, backward data, backward filter) has its own convolution
//   descriptor. The ranking is asked with the mode's math type on it; each candidate
//   reports the math type it runs with (perf.mathType, not always the one asked: a
//   tensor-op request also ranks algorithms without tensor cores), and cuDNN wants the
//   descriptor of the call to carry that math type. So the chosen candidate's math type is
//   set on that direction's descriptor (before its workspace size is asked), and stays there
//   for every later call of that direction; the three may differ.
// - Precision (kernels/math_mode.h): fp32 asks with CUDNN_FMA_MATH and takes only
//   candidates that run with CUDNN_FMA_MATH. CUDNN_DEFAULT_MATH on the descriptor would let
//   cuDNN pick TF32 tensor-core kernels for fp32 data on Ampere and newer GPUs, and TF32
//   must never be silent (docs/design.md §3). tf32 asks with CUDNN_TENSOR_OP_MATH on the
//   fp32 descriptors and takes tensor-op, default or FMA candidates. bf16 casts the two
//   operands into bf16 scratch tensors, describes x, w and y as CUDNN_DATA_BFLOAT16 with an
//   fp32 compute type, asks with CUDNN_TENSOR_OP_MATH (takes the same candidates as tf32),
//   writes the result into bf16 scratch and widens it into the f32 output (backward filter:
//   adds it to dw). Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (that would let cuDNN
//   convert operands down to f16). Scratch comes from the caching allocator, so after the
//   first step no call allocates device memory.
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
#include "kernels/elementwise.h"

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
  explicit TensorDesc(const std::array<int, 5>& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    GRIDNN_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    int strides[5];
    strides[4] = 1;
    for (int i = 3; i >= 0; --i) strides[i] = strides[i + 1] * dims[size_t(i + 1)];
    GRIDNN_CHECK_CUDNN(cudnnSetTensorNdDescriptor(d, type, 5, dims.data(), strides));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const std::array<int, 5>& dims, cudnnDataType_t type) {
    GRIDNN_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d));
    GRIDNN_CHECK_CUDNN(cudnnSetFilterNdDescriptor(d, type, CUDNN_TENSOR_NCHW, 5, dims.data()));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  // The compute type is fp32 in every mode (bf16 data: products accumulated in fp32). The
  // math type is the mode's until an algorithm is chosen (choose() then sets the algorithm's).
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

// The data type of the convolution's operands and result, and the math type, per mode.
cudnnDataType_t data_type(ops::MathMode m) {
  return m == ops::MathMode::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}
cudnnMathType_t math_type(ops::MathMode m) {
  return m == ops::MathMode::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

struct Plan {
  Plan(int64_t n, const Conv3dGeometry& g, ops::MathMode mode)
      : math(mode),
        x(dims5(n, g.in_channels, g.in_size), data_type(mode)),
        y(dims5(n, g.out_channels, g.out_size), data_type(mode)),
        y_f32(dims5(n, g.out_channels, g.out_size)),
        bias({1, int(g.out_channels), 1, 1, 1}),
        w(dims5(g.out_channels, g.in_channels, g.kernel), data_type(mode)),
        conv_fwd(g, math_type(mode)),
        conv_bwd_data(g, math_type(mode)),
        conv_bwd_filter(g, math_type(mode)) {}
  ops::MathMode math;
  TensorDesc x, y;      // in the mode's data type
  TensorDesc y_f32, bias;  // the f32 output the bias is added to, and the bias
  FilterDesc w;
  // One per direction, each carrying the math type of the algorithm chosen for it.
  ConvDesc conv_fwd, conv_bwd_data, conv_bwd_filter;
  bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

using PlanKey = std::array<int64_t, 17>;

Plan& plan_for(int device, int64_t n, const Conv3dGeometry& g, ops::MathMode math) {
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

// The math type a candidate runs with is set on the call's descriptor, so it must be one
// the mode allows there: fp32 only CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH permits TF32 on
// Ampere and newer); tf32 and bf16 also CUDNN_DEFAULT_MATH and CUDNN_TENSOR_OP_MATH; never
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (operands converted down to f16).
bool acceptable(cudnnStatus_t status, cudnnDeterminism_t determinism, cudnnMathType_t algo_math,
                ops::MathMode mode) {
  if (status != CUDNN_STATUS_SUCCESS || determinism != CUDNN_DETERMINISTIC) return false;
  if (algo_math == CUDNN_FMA_MATH) return true;
  return mode != ops::MathMode::fp32 &&
         (algo_math == CUDNN_DEFAULT_MATH || algo_math == CUDNN_TENSOR_OP_MATH);
}

[[noreturn]] void no_algorithm(const char* direction, int64_t n, const Conv3dGeometry& g,
                               ops::MathMode mode) {
  throw Error(std::string("conv3d (cuDNN): no deterministic ") + ops::str(mode) + " " + direction +
              " algorithm for batch " + std::to_string(n) + ", " + ops::str(g) +
              "; try another math mode, batch size or padding, or run this layer on the cpu");
}

// The first acceptable candidate of cuDNN's ranking whose workspace size cuDNN reports,
// asked with the mode's math type on `conv` (the direction's descriptor). The chosen
// candidate's math type is left on `conv`, where every call of this direction finds it;
// the workspace size is asked with it already set.
template <class Perf, class Algo, class GetAll, class GetBytes>
void choose(const char* direction, int64_t n, const Conv3dGeometry& g, ops::MathMode mode,
            cudnnConvolutionDescriptor_t conv, int max_count, GetAll get_all, GetBytes get_bytes,
            Algo* algo, size_t* bytes) {
  GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(conv, math_type(mode)));
  std::unique_ptr<Perf[]> perf(new Perf[size_t(max_count)]);
  int returned = 0;
  GRIDNN_CHECK_CUDNN(get_all(max_count, &returned, perf.get()));
  for (int i = 0; i < returned; ++i) {
    if (!acceptable(perf[i].status, perf[i].determinism, perf[i].mathType, mode)) continue;
    GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(conv, perf[i].mathType));
    size_t size = 0;
    if (get_bytes(perf[i].algo, &size) != CUDNN_STATUS_SUCCESS) continue;
    *algo = perf[i].algo;
    *bytes = size;
    return;
  }
  GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(conv, math_type(mode)));
  no_algorithm(direction, n, g, mode);
}

void ensure_forward(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.have_fwd) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
  choose<cudnnConvolutionFwdAlgoPerf_t>(
      "forward", n, g, p.math, p.conv_fwd.d, count,
      [&](int req, int* ret, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.d, p.w.d, p.conv_fwd.d, p.y.d, req, ret,
                                                      perf);
      },
      [&](cudnnConvolutionFwdAlgo_t a, size_t* size) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, p.x.d, p.w.d, p.conv_fwd.d, p.y.d, a,
                                                       size);
      },
      &p.fwd, &p.fwd_bytes);
  p.have_fwd = true;
}

void ensure_backward_data(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.have_bwd_data) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
  choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      "backward-data", n, g, p.math, p.conv_bwd_data.d, count,
      [&](int req, int* ret, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.d, p.y.d, p.conv_bwd_data.d,
                                                           p.x.d, req, ret, perf);
      },
      [&](cudnnConvolutionBwdDataAlgo_t a, size_t* size) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.d, p.y.d, p.conv_bwd_data.d,
                                                            p.x.d, a, size);
      },
      &p.bwd_data, &p.bwd_data_bytes);
  p.have_bwd_data = true;
}

void ensure_backward_filter(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.have_bwd_filter) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
  choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      "backward-filter", n, g, p.math, p.conv_bwd_filter.d, count,
      [&](int req, int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x.d, p.y.d, p.conv_bwd_filter.d,
                                                             p.w.d, req, ret, perf);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* size) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.d, p.y.d, p.conv_bwd_filter.d,
                                                              p.w.d, a, size);
      },
      &p.bwd_filter, &p.bwd_filter_bytes);
  p.have_bwd_filter = true;
}

const float kOne = 1.0f, kZero = 0.0f;

// An operand as the plan's data type: the f32 tensor itself, or a bf16 scratch copy.
Tensor operand(const Tensor& t, ops::MathMode mode) {
  if (mode != ops::MathMode::bf16) return t;
  Tensor out = Tensor::empty(t.shape(), DType::bf16, t.device());
  ops::cast(t, out);
  return out;
}

// Where the op writes its result: `out` itself, or a bf16 scratch tensor of its shape.
Tensor result_buffer(const Tensor& out, ops::MathMode mode) {
  return mode == ops::MathMode::bf16 ? Tensor::empty(out.shape(), DType::bf16, out.device()) : out;
}

}  // namespace

void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g,
                    Tensor& y, ops::MathMode math) {
  const int device = x.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, x.size(0), g, math);
  ensure_forward(h, p, x.size(0), g);
  void* ws = workspace(device, p.fwd_bytes);
  const Tensor x_op = operand(x, math), w_op = operand(w, math);
  Tensor y_op = result_buffer(y, math);
  GRIDNN_CHECK_CUDNN(cudnnConvolutionForward(h, &kOne, p.x.d, x_op.raw(), p.w.d, w_op.raw(),
                                             p.conv_fwd.d, p.fwd, ws, p.fwd_bytes, &kZero, p.y.d,
                                             y_op.raw()));
  if (math == ops::MathMode::bf16) ops::cast(y_op, y);
  if (bias.defined())  // y += bias, broadcast over N, D, H, W (fp32 in every mode)
    GRIDNN_CHECK_CUDNN(cudnnAddTensor(h, &kOne, p.bias.d, bias.raw(), &kOne, p.y_f32.d, y.raw()));
}

void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx,
                          ops::MathMode math) {
  const int device = dy.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, dy.size(0), g, math);
  ensure_backward_data(h, p, dy.size(0), g);
  void* ws = workspace(device, p.bwd_data_bytes);
  const Tensor dy_op = operand(dy, math), w_op = operand(w, math);
  Tensor dx_op = result_buffer(dx, math);
  GRIDNN_CHECK_CUDNN(cudnnConvolutionBackwardData(h, &kOne, p.w.d, w_op.raw(), p.y.d, dy_op.raw(),
                                                  p.conv_bwd_data.d, p.bwd_data, ws,
                                                  p.bwd_data_bytes, &kZero, p.x.d, dx_op.raw()));
  if (math == ops::MathMode::bf16) ops::cast(dx_op, dx);
}

void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw,
                            ops::MathMode math) {
  const int device = x.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, x.size(0), g, math);
  ensure_backward_filter(h, p, x.size(0), g);
  void* ws = workspace(device, p.bwd_filter_bytes);
  const Tensor x_op = operand(x, math), dy_op = operand(dy, math);
  if (math != ops::MathMode::bf16) {
    GRIDNN_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
        h, &kOne, p.x.d, x_op.raw(), p.y.d, dy_op.raw(), p.conv_bwd_filter.d, p.bwd_filter, ws,
        p.bwd_filter_bytes, &kOne, p.w.d, dw.raw()));  // beta = 1: dw accumulates
    return;
  }
  // bf16: the gradient of this call into bf16 scratch (beta = 0), widened, added to dw.
  Tensor dw_op = result_buffer(dw, math);
  GRIDNN_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
      h, &kOne, p.x.d, x_op.raw(), p.y.d, dy_op.raw(), p.conv_bwd_filter.d, p.bwd_filter, ws,
      p.bwd_filter_bytes, &kZero, p.w.d, dw_op.raw()));
  ops::axpy(1.0f, ops::cast(dw_op, DType::f32), dw);
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
