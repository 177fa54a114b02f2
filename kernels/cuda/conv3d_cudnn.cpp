// CUDA backend of kernels/conv3d.h through cuDNN's classic convolution API (Nd
// descriptors, NCDHW; fp32 tensors, computed in the math mode asked for). Compiled only in
// cuDNN builds (kernels/CMakeLists.txt); without cuDNN, kernels/conv3d.cpp turns a CUDA
// tensor into an error saying how to build with it.
//
// - One cuDNN handle per device, created on first use and bound to the device's compute
//   stream (core/cuda_context.h), so convolutions queue behind the other kernels.
// - A Plan per (device, batch, geometry, math mode) holds the descriptors and, once each
//   direction is first used, its candidate algorithms: chosen once, then cached. Candidates
//   come from cudnnGet*Algorithm_v7 (cuDNN's heuristic ranking, no timing runs), in its
//   order: those supported, deterministic (CUDNN_DETERMINISTIC: no atomics, the same bits
//   every run) and of an allowed math type. The first that runs is kept; one that fails its
//   first run (NOT_SUPPORTED, BAD_PARAM, EXECUTION_FAILED, an engine that did not compile)
//   gives way to the next, with a line on stderr (kernels/algo_fallback.h). GRIDNN_LOG_CUDNN=1
//   prints each direction's choice: algorithm, math type and workspace.
// - Each direction (forward, backward data, backward filter) has its own convolution
//   descriptor. The ranking is asked with the mode's math type on it; each candidate
//   reports the math type it runs with (perf.mathType, not always the one asked: a
//   tensor-op request also ranks algorithms without tensor cores), and cuDNN wants the
//   descriptor of the call to carry that math type. So each candidate's math type is set on
//   that direction's descriptor before its workspace size is asked and before it runs, and
//   the kept one's stays there for every later call of that direction; the three may differ.
// - Precision (kernels/math_mode.h): fp32 asks with CUDNN_FMA_MATH and takes only
//   candidates that run with CUDNN_FMA_MATH. CUDNN_DEFAULT_MATH on the descriptor would let
//   cuDNN pick TF32 tensor-core kernels for fp32 data on Ampere and newer GPUs, and TF32
//   must never be silent (docs/design.md §3). tf32 asks with CUDNN_TENSOR_OP_MATH on the
//   fp32 descriptors and takes tensor-op, default or FMA candidates. bf16 casts the two
//   operands into bf16 scratch tensors, describes x, w and y as CUDNN_DATA_BFLOAT16 with an
//   fp32 compute type, asks with CUDNN_TENSOR_OP_MATH (takes the same candidates as tf32),
//   writes the result into bf16 scratch and widens it into the f32 output (backward filter:
//   adds it to dw). A direction with no deterministic bf16 candidate (a notice says so) runs
//   in fp32 on operands rounded to bf16 and widened back: bf16's values, products exact in
//   fp32, so the mode keeps its meaning. Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (that
//   would let cuDNN convert operands down to f16). Scratch comes from the caching allocator, so after the
//   first step no call allocates device memory.
// - The workspace is one device buffer per device from the caching allocator, grown when a
//   plan needs more and reused by every call (kernels run in stream order, so reuse is safe).
//   Each plan's algorithms are those whose workspace fits its budget
//   (ops::cuda_conv_workspace_budget), so the buffer stays within what the memory model holds.
// - Parameter gradients accumulate: backward filter and bias run with beta = 1.
// - Each pass runs on the kernel's taps that reach the input, as on the CPU
//   (ops::conv3d_reaching_taps), widened to a geometry whose output size under cuDNN's padding
//   on both sides is g's (ops::conv3d_symmetric_taps): the weights on those taps are copied
//   out, their gradient added back into dw; a kernel of which no tap reaches gives y = bias,
//   dx = 0 and leaves dw alone.
// - Backward filter with one input channel in fp32 (a network's stem) may run the
//   one-channel kernel instead (kernels/cuda/conv3d_one_channel.h): at a plan's first call
//   both run into a scratch gradient, timed with CUDA events (the fastest of two runs after
//   one untimed), and the kernel runs that plan from then on unless cuDNN was more than
//   kKernelMargin times faster. Its partials use the same workspace buffer as cuDNN.
// Handles, plans and workspaces live for the whole process and are never destroyed (as the
// device contexts: tearing them down during static destruction, after the CUDA runtime or
// the caching allocator may be gone, is unsafe). Calls for one device are expected from one
// thread at a time (the handle is not meant for concurrent use).
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/memory.h"
#include "kernels/algo_fallback.h"
#include "kernels/conv3d.h"
#include "kernels/cuda/conv3d_one_channel.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"

namespace gridnn::kernels::cuda {
namespace {

// ---- handle and workspace, per device ------------------------------------------------

std::mutex registry_mutex;  // guards the maps below

cudnnHandle_t handle_for(int device) {
  static auto& handles = *new std::map<int, cudnnHandle_t>;  // never destroyed (see header)
  auto& ctx = ::gridnn::cuda::context(device);               // makes the device current
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  GRIDNN_CHECK_CUDNN(cudnnCreate(&h));
  GRIDNN_CHECK_CUDNN(cudnnSetStream(h, ctx.stream));
  handles[device] = h;
  return h;
}

// A device buffer of at least `bytes` (nullptr for 0), reused across calls. A larger one
// replaces it after it is let go (stream order makes that safe), so the two never exist at
// once: the buffer is at most the largest budget the memory model holds.
void* workspace(int device, size_t bytes) {
  static auto& buffers = *new std::map<int, Tensor>;
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex);
  Tensor& buf = buffers[device];
  if (!buf.defined() || buf.nbytes() < bytes) {
    buf = Tensor();
    buf = Tensor::empty({int64_t((bytes + 3) / 4)}, DType::f32, Device::cuda(device));
  }
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
  // math type is the mode's until candidates are asked for; then each run sets its candidate's.
  ConvDesc(const Conv3dGeometry& g, cudnnMathType_t math) {
    GRIDNN_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    int pad[3], stride[3], dilation[3] = {1, 1, 1};
    for (int i = 0; i < 3; ++i) {
      pad[i] = int(g.padding[i]);
      stride[i] = int(g.stride[i]);
    }
    GRIDNN_CHECK_CUDNN(
        cudnnSetConvolutionNdDescriptor(d, 3, pad, stride, dilation, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
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
cudnnDataType_t data_type(ops::MathMode m) { return m == ops::MathMode::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }
cudnnMathType_t math_type(ops::MathMode m) { return m == ops::MathMode::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

// One direction of a plan: its descriptor, the mode it runs in, and its candidates.
struct Direction {
  Direction(const Conv3dGeometry& g, ops::MathMode mode) : conv(g, math_type(mode)), runs(mode) {}
  ConvDesc conv;
  // The plan's mode, or fp32 for a bf16 plan without a deterministic bf16 candidate: the
  // operands are then rounded to bf16 and widened back (bf16's values, products exact in
  // fp32), so the result keeps the bf16 mode's meaning.
  ops::MathMode runs;
  int desc_math = -1;                 // the math type now on `conv`
  std::optional<AlgoFallback> algos;  // made at the direction's first use
};

struct Plan {
  Plan(int64_t n, const Conv3dGeometry& g, ops::MathMode mode)
      : math(mode),
        x(dims5(n, g.in_channels, g.in_size), data_type(mode)),
        y(dims5(n, g.out_channels, g.out_size), data_type(mode)),
        w(dims5(g.out_channels, g.in_channels, g.kernel), data_type(mode)),
        x_f32(dims5(n, g.in_channels, g.in_size)),
        y_f32(dims5(n, g.out_channels, g.out_size)),
        w_f32(dims5(g.out_channels, g.in_channels, g.kernel), CUDNN_DATA_FLOAT),
        bias({1, int(g.out_channels), 1, 1, 1}),
        fwd(g, mode),
        bwd_data(g, mode),
        bwd_filter(g, mode) {}
  ops::MathMode math;
  TensorDesc x, y;  // in the mode's data type
  FilterDesc w;
  TensorDesc x_f32, y_f32;  // f32: the output the bias is added to, and a direction run in fp32
  FilterDesc w_f32;
  TensorDesc bias;
  Direction fwd, bwd_data, bwd_filter;
  // Backward filter of a one-input-channel fp32 plan the one-channel kernel takes: whether
  // that kernel (1) or cuDNN (0) runs it, timed at its first call (-1 until then).
  int filter_by_tiles = -1;

  // The descriptors of a direction that runs in `m`.
  const TensorDesc& x_in(ops::MathMode m) const { return m == math ? x : x_f32; }
  const TensorDesc& y_in(ops::MathMode m) const { return m == math ? y : y_f32; }
  const FilterDesc& w_in(ops::MathMode m) const { return m == math ? w : w_f32; }
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
bool acceptable(cudnnStatus_t status, cudnnDeterminism_t determinism, cudnnMathType_t algo_math, ops::MathMode mode) {
  if (status != CUDNN_STATUS_SUCCESS || determinism != CUDNN_DETERMINISTIC) return false;
  if (algo_math == CUDNN_FMA_MATH) return true;
  return mode != ops::MathMode::fp32 && (algo_math == CUDNN_DEFAULT_MATH || algo_math == CUDNN_TENSOR_OP_MATH);
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor-op";
    case CUDNN_FMA_MATH:
      return "FMA";
    default:
      return "tensor-op with conversion";
  }
}

// Status categories worth running the next candidate for (cuDNN 9 codes are category +
// detail): the candidate does not support this case (NOT_SUPPORTED), rejects a parameter
// (BAD_PARAM), failed to launch or run (EXECUTION_FAILED), or is a runtime-compiled engine
// that did not compile.
bool retryable(int status) {
  const int category = CUDNN_STATUS_CATEGORY(status);
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM ||
         category == CUDNN_STATUS_EXECUTION_FAILED || status == CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED;
}

// Each plan direction's choice is printed with GRIDNN_LOG_CUDNN=1 (the GPU check sets it);
// a candidate that fails its first run is always reported.
AlgoFallback::Log cudnn_log() {
  static const bool verbose = [] {
    const char* v = std::getenv("GRIDNN_LOG_CUDNN");
    return v && *v && std::string(v) != "0";
  }();
  AlgoFallback::Log log;
  log.fallback = [](const std::string& line) { std::fprintf(stderr, "gridnn: %s\n", line.c_str()); };
  if (verbose) log.chosen = log.fallback;
  return log;
}

std::string size_text(size_t bytes) {
  if (bytes < (size_t(1) << 20)) return std::to_string(bytes) + " B";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(size_t(1) << 20));
  return text;
}

// The acceptable candidates of cuDNN's ranking for a direction run in `mode`, in its order,
// each with the workspace size asked with its own math type on the descriptor.
template <class Perf, class GetAll, class GetBytes>
std::vector<AlgoCandidate> candidates(Direction& d, ops::MathMode mode, int max_count, GetAll get_all,
                                      GetBytes get_bytes, const std::vector<const char*>& names) {
  GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.d, math_type(mode)));
  d.desc_math = math_type(mode);
  std::unique_ptr<Perf[]> perf(new Perf[size_t(max_count)]);
  int returned = 0;
  GRIDNN_CHECK_CUDNN(get_all(mode, max_count, &returned, perf.get()));
  std::vector<AlgoCandidate> out;
  for (int i = 0; i < returned; ++i) {
    if (!acceptable(perf[i].status, perf[i].determinism, perf[i].mathType, mode)) continue;
    GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.d, perf[i].mathType));
    d.desc_math = perf[i].mathType;
    size_t bytes = 0;
    if (get_bytes(mode, perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    const int algo = int(perf[i].algo);
    const char* name = algo >= 0 && size_t(algo) < names.size() ? names[size_t(algo)] : "?";
    out.push_back(
        {algo, int(perf[i].mathType), bytes,
         std::string(name) + " (" + math_name(perf[i].mathType) + " math, " + size_text(bytes) + " workspace)"});
  }
  return out;
}

// Makes d.algos at the direction's first use: the plan mode's candidates; for bf16 without
// one, fp32's (see Direction::runs).
template <class Perf, class GetAll, class GetBytes>
void ensure(Direction& d, const char* direction, int64_t n, const Conv3dGeometry& g, ops::MathMode mode, int max_count,
            GetAll get_all, GetBytes get_bytes, const std::vector<const char*>& names) {
  if (d.algos) return;
  std::string what =
      std::string("cuDNN ") + direction + " of " + ops::str(g) + ", batch " + std::to_string(n) + ", " + ops::str(mode);
  std::vector<AlgoCandidate> ranked = candidates<Perf>(d, mode, max_count, get_all, get_bytes, names);
  d.runs = mode;
  if (ranked.empty() && mode == ops::MathMode::bf16) {
    ranked = candidates<Perf>(d, ops::MathMode::fp32, max_count, get_all, get_bytes, names);
    d.runs = ops::MathMode::fp32;
    what += " (no deterministic bf16 algorithm: bf16-rounded operands in fp32 arithmetic)";
    if (!ranked.empty()) std::fprintf(stderr, "gridnn: %s\n", what.c_str());
  }
  if (ranked.empty())
    throw Error("conv3d (cuDNN): no deterministic " + std::string(ops::str(mode)) + " " + direction +
                " algorithm for batch " + std::to_string(n) + ", " + ops::str(g) +
                "; try another math mode, batch size or padding, or run this layer on the cpu");
  // Within the workspace budget the memory model holds: those asking for more are passed
  // over; where every one does, the least hungry runs, and the run says so (its peak may then
  // pass the prediction).
  const size_t budget = size_t(ops::cuda_conv_workspace_budget(g, n));
  std::vector<AlgoCandidate> within;
  for (const AlgoCandidate& c : ranked)
    if (c.workspace <= budget) within.push_back(c);
  if (within.empty()) {
    within.push_back(
        *std::min_element(ranked.begin(), ranked.end(),
                          [](const AlgoCandidate& a, const AlgoCandidate& b) { return a.workspace < b.workspace; }));
    std::fprintf(stderr,
                 "gridnn: warning: %s: every deterministic algorithm asks for more workspace than its budget "
                 "(%s); %s runs, beyond what the memory prediction holds\n",
                 what.c_str(), size_text(budget).c_str(), within.front().name.c_str());
  }
  ranked = std::move(within);
  d.algos.emplace(std::move(what), std::move(ranked),
                  AlgoStatusRules{retryable, [](int s) { return std::string(cudnnGetErrorString(cudnnStatus_t(s))); }},
                  cudnn_log());
}

const std::vector<const char*> kFwdNames = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const std::vector<const char*> kBwdDataNames = {"ALGO_0",     "ALGO_1",   "FFT",
                                                "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const std::vector<const char*> kBwdFilterNames = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};

void ensure_forward(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.fwd.algos) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
  ensure<cudnnConvolutionFwdAlgoPerf_t>(
      p.fwd, "forward", n, g, p.math, count,
      [&](ops::MathMode m, int req, int* ret, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x_in(m).d, p.w_in(m).d, p.fwd.conv.d, p.y_in(m).d, req, ret,
                                                      perf);
      },
      [&](ops::MathMode m, cudnnConvolutionFwdAlgo_t a, size_t* size) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, p.x_in(m).d, p.w_in(m).d, p.fwd.conv.d, p.y_in(m).d, a, size);
      },
      kFwdNames);
}

void ensure_backward_data(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.bwd_data.algos) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
  ensure<cudnnConvolutionBwdDataAlgoPerf_t>(
      p.bwd_data, "backward-data", n, g, p.math, count,
      [&](ops::MathMode m, int req, int* ret, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w_in(m).d, p.y_in(m).d, p.bwd_data.conv.d, p.x_in(m).d,
                                                           req, ret, perf);
      },
      [&](ops::MathMode m, cudnnConvolutionBwdDataAlgo_t a, size_t* size) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w_in(m).d, p.y_in(m).d, p.bwd_data.conv.d, p.x_in(m).d,
                                                            a, size);
      },
      kBwdDataNames);
}

void ensure_backward_filter(cudnnHandle_t h, Plan& p, int64_t n, const Conv3dGeometry& g) {
  if (p.bwd_filter.algos) return;
  int count = 0;
  GRIDNN_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
  ensure<cudnnConvolutionBwdFilterAlgoPerf_t>(
      p.bwd_filter, "backward-filter", n, g, p.math, count,
      [&](ops::MathMode m, int req, int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x_in(m).d, p.y_in(m).d, p.bwd_filter.conv.d,
                                                             p.w_in(m).d, req, ret, perf);
      },
      [&](ops::MathMode m, cudnnConvolutionBwdFilterAlgo_t a, size_t* size) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x_in(m).d, p.y_in(m).d, p.bwd_filter.conv.d,
                                                              p.w_in(m).d, a, size);
      },
      kBwdFilterNames);
}

// Runs `call` (cudnnStatus_t(const AlgoCandidate&, void* workspace)) with the direction's
// candidates (AlgoFallback), each with its math type on the descriptor and its workspace;
// a failure that ends the fallback is thrown as CudnnError naming `call_name` and the
// candidate.
template <class Call>
void run(int device, Direction& d, const char* call_name, Call call) {
  const int status = d.algos->run([&](const AlgoCandidate& c) {
    if (d.desc_math != c.math) {
      GRIDNN_CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.d, cudnnMathType_t(c.math)));
      d.desc_math = c.math;
    }
    const cudnnStatus_t s = call(c, workspace(device, c.workspace));
    if (s != CUDNN_STATUS_SUCCESS) cudaGetLastError();  // a failed launch's error is not ours
    return int(s);
  });
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudnnError(std::string(call_name) + " with " + d.algos->current().name,
                     cudnnGetErrorString(cudnnStatus_t(status)), __FILE__, __LINE__);
}

const float kOne = 1.0f, kZero = 0.0f;

// An operand as a direction running in `runs` takes it: the f32 tensor itself, a bf16
// scratch copy, or (bf16 plan run in fp32) its values rounded to bf16 and widened back.
Tensor operand(const Tensor& t, ops::MathMode plan, ops::MathMode runs) {
  if (plan != ops::MathMode::bf16) return t;
  Tensor b = Tensor::empty(t.shape(), DType::bf16, t.device());
  ops::cast(t, b);
  return runs == ops::MathMode::bf16 ? b : ops::cast(b, DType::f32);
}

// Where the op writes its result: `out` itself, or a bf16 scratch tensor of its shape.
Tensor result_buffer(const Tensor& out, ops::MathMode runs) {
  return runs == ops::MathMode::bf16 ? Tensor::empty(out.shape(), DType::bf16, out.device()) : out;
}

void forward_on(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                ops::MathMode math) {
  const int device = x.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, x.size(0), g, math);
  ensure_forward(h, p, x.size(0), g);
  const ops::MathMode runs = p.fwd.runs;
  const Tensor x_op = operand(x, math, runs), w_op = operand(w, math, runs);
  Tensor y_op = result_buffer(y, runs);
  run(device, p.fwd, "cudnnConvolutionForward", [&](const AlgoCandidate& c, void* ws) {
    return cudnnConvolutionForward(h, &kOne, p.x_in(runs).d, x_op.raw(), p.w_in(runs).d, w_op.raw(), p.fwd.conv.d,
                                   cudnnConvolutionFwdAlgo_t(c.algo), ws, c.workspace, &kZero, p.y_in(runs).d,
                                   y_op.raw());
  });
  if (runs == ops::MathMode::bf16) ops::cast(y_op, y);
  if (bias.defined())  // y += bias, broadcast over N, D, H, W (fp32 in every mode)
    GRIDNN_CHECK_CUDNN(cudnnAddTensor(h, &kOne, p.bias.d, bias.raw(), &kOne, p.y_f32.d, y.raw()));
}

void backward_data_on(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx, ops::MathMode math) {
  const int device = dy.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, dy.size(0), g, math);
  ensure_backward_data(h, p, dy.size(0), g);
  const ops::MathMode runs = p.bwd_data.runs;
  const Tensor dy_op = operand(dy, math, runs), w_op = operand(w, math, runs);
  Tensor dx_op = result_buffer(dx, runs);
  run(device, p.bwd_data, "cudnnConvolutionBackwardData", [&](const AlgoCandidate& c, void* ws) {
    return cudnnConvolutionBackwardData(h, &kOne, p.w_in(runs).d, w_op.raw(), p.y_in(runs).d, dy_op.raw(),
                                        p.bwd_data.conv.d, cudnnConvolutionBwdDataAlgo_t(c.algo), ws, c.workspace,
                                        &kZero, p.x_in(runs).d, dx_op.raw());
  });
  if (runs == ops::MathMode::bf16) ops::cast(dx_op, dx);
}

// cuDNN's backward filter on plan p.
void cudnn_backward_filter(cudnnHandle_t h, Plan& p, int device, const Tensor& x, const Tensor& dy,
                           const Conv3dGeometry& g, Tensor& dw, ops::MathMode math) {
  ensure_backward_filter(h, p, x.size(0), g);
  const ops::MathMode runs = p.bwd_filter.runs;
  const Tensor x_op = operand(x, math, runs), dy_op = operand(dy, math, runs);
  // f32: accumulated into dw (beta = 1). bf16: this call's gradient into bf16 scratch
  // (beta = 0), widened and added to dw. A candidate that fails its first run has written
  // nothing: cuDNN reports NOT_SUPPORTED and BAD_PARAM before launching, and a failed launch
  // runs no kernel.
  const bool accumulate = runs != ops::MathMode::bf16;
  Tensor dw_op = result_buffer(dw, runs);
  run(device, p.bwd_filter, "cudnnConvolutionBackwardFilter", [&](const AlgoCandidate& c, void* ws) {
    return cudnnConvolutionBackwardFilter(h, &kOne, p.x_in(runs).d, x_op.raw(), p.y_in(runs).d, dy_op.raw(),
                                          p.bwd_filter.conv.d, cudnnConvolutionBwdFilterAlgo_t(c.algo), ws, c.workspace,
                                          accumulate ? &kOne : &kZero, p.w_in(runs).d, dw_op.raw());
  });
  if (!accumulate) ops::axpy(1.0f, ops::cast(dw_op, DType::f32), dw);
}

// A pair of CUDA events, destroyed with it.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    GRIDNN_CHECK_CUDA(cudaEventCreate(&start));
    GRIDNN_CHECK_CUDA(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

constexpr int kTimedRuns = 2;  // per contender, after one untimed run
// The one-channel kernel runs unless cuDNN took less than 1/kKernelMargin of its time: the
// choice decides the result's bits, so it should not flip between runs where the two are
// close (the stem's is 50x or more either way).
constexpr float kKernelMargin = 2.0f;

// The milliseconds of the fastest of kTimedRuns runs of `f` on `stream`, after one untimed.
template <class F>
float fastest_ms(cudaStream_t stream, F&& f) {
  f();
  EventPair events;
  float best = 0.0f;
  for (int i = 0; i < kTimedRuns; ++i) {
    GRIDNN_CHECK_CUDA(cudaEventRecord(events.start, stream));
    f();
    GRIDNN_CHECK_CUDA(cudaEventRecord(events.stop, stream));
    GRIDNN_CHECK_CUDA(cudaEventSynchronize(events.stop));
    float ms = 0.0f;
    GRIDNN_CHECK_CUDA(cudaEventElapsedTime(&ms, events.start, events.stop));
    if (i == 0 || ms < best) best = ms;
  }
  return best;
}

// Backward filter of g on its taps (narrowed by the caller): for an fp32 plan with one input
// channel that the one-channel kernel takes (kernels/cuda/conv3d_one_channel.h), that kernel
// or cuDNN if it ran kKernelMargin times faster at the plan's first call (both into a scratch
// gradient, so dw sees only the chosen one's sum); else cuDNN. Both are deterministic.
void backward_filter_on(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw, ops::MathMode math) {
  const int device = x.device().index;
  cudnnHandle_t h = handle_for(device);
  Plan& p = plan_for(device, x.size(0), g, math);
  auto tiles = [&](Tensor& out) {
    one_channel::backward_filter(x, dy, g, out, workspace(device, one_channel::workspace_bytes(g, x.size(0))));
  };
  if (p.filter_by_tiles < 0 &&
      (math != ops::MathMode::fp32 || !one_channel::fits(g, device) ||
       one_channel::workspace_bytes(g, x.size(0)) > size_t(ops::cuda_conv_workspace_budget(g, x.size(0)))))
    p.filter_by_tiles = 0;
  if (p.filter_by_tiles < 0) {  // the first call: time the two
    Tensor scratch = Tensor::zeros(dw.shape(), DType::f32, dw.device());
    const cudaStream_t stream = ::gridnn::cuda::context(device).stream;
    const float cudnn_ms = fastest_ms(stream, [&] { cudnn_backward_filter(h, p, device, x, dy, g, scratch, math); });
    const float tiles_ms = fastest_ms(stream, [&] { tiles(scratch); });
    p.filter_by_tiles = tiles_ms < kKernelMargin * cudnn_ms ? 1 : 0;
    const AlgoFallback::Log log = cudnn_log();
    if (log.chosen) {
      char line[160];
      std::snprintf(line, sizeof line, "one-channel kernel %.3f ms, cuDNN %.3f ms: ", double(tiles_ms),
                    double(cudnn_ms));
      log.chosen(std::string("backward-filter of ") + ops::str(g) + ", batch " + std::to_string(x.size(0)) + ": " +
                 line + (p.filter_by_tiles ? "the one-channel kernel" : "cuDNN") + " runs it");
    }
  }
  if (p.filter_by_tiles == 1) return tiles(dw);
  cudnn_backward_filter(h, p, device, x, dy, g, dw, math);
}

// The weights w of g on the taps t keeps (ops::conv3d_taps_box), a tensor of t.geometry's.
Tensor weights_on_taps(const Tensor& w, const Conv3dGeometry& g, const ops::ConvTaps& t) {
  Tensor out = Tensor::empty(ops::conv3d_weight_shape(t.geometry), DType::f32, w.device());
  strided_move(w, out, ops::conv3d_taps_box(g, t, true), LayoutMode::copy);
  return out;
}

// Zeros into t (on its device's compute stream).
void zero(Tensor& t) { zero_bytes(t.raw(), t.device(), t.nbytes()); }

}  // namespace

// The entry points: each pass on the taps that reach the input, widened to a geometry with
// g's output size under cuDNN's padding on both sides (ops::conv3d_symmetric_taps); the
// taps left out read padding alone (their products are 0), as on the CPU.
void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                    ops::MathMode math) {
  const ops::ConvTaps t = ops::conv3d_symmetric_taps(g);
  if (t.all(g)) return forward_on(x, w, bias, g, y, math);
  if (!t.none()) return forward_on(x, weights_on_taps(w, g, t), bias, t.geometry, y, math);
  zero(y);  // every output voxel is padding alone: y = bias
  if (!bias.defined()) return;
  Plan& p = plan_for(x.device().index, x.size(0), g, math);
  GRIDNN_CHECK_CUDNN(
      cudnnAddTensor(handle_for(x.device().index), &kOne, p.bias.d, bias.raw(), &kOne, p.y_f32.d, y.raw()));
}

void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx, ops::MathMode math) {
  const ops::ConvTaps t = ops::conv3d_symmetric_taps(g);
  if (t.all(g)) return backward_data_on(dy, w, g, dx, math);
  if (!t.none()) return backward_data_on(dy, weights_on_taps(w, g, t), t.geometry, dx, math);
  zero(dx);
}

void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw,
                            ops::MathMode math) {
  const ops::ConvTaps t = ops::conv3d_symmetric_taps(g);
  if (t.all(g)) return backward_filter_on(x, dy, g, dw, math);
  if (t.none()) return;
  Tensor dw_taps = Tensor::zeros(ops::conv3d_weight_shape(t.geometry), DType::f32, dw.device());
  backward_filter_on(x, dy, t.geometry, dw_taps, math);
  strided_move(dw_taps, dw, ops::conv3d_taps_box(g, t, false), LayoutMode::add);
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
