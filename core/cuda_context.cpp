// Per-device CUDA state (core/cuda_context.h). Each device's context is built once, on
// first use, under a std::call_once (a failed build throws and is retried by the next
// call). Contexts are never destroyed: tensors and allocators may outlive main(), and
// destroying streams or cuBLAS handles during static destruction is unsafe.
#include "core/cuda_context.h"

#include <memory>
#include <mutex>

#include "core/cuda_allocator.h"
#include "core/cuda_check.h"
#include "core/device.h"

namespace gridnn::cuda {
namespace {

struct Slot {
  std::once_flag once;
  DeviceContext* context = nullptr;
};

// One slot per device, sized on first use (never freed, see above).
Slot& slot(int device) {
  require_device(Device::cuda(device));  // gridnn::Error for cuda:99 or no device at all
  static Slot* slots = new Slot[size_t(cuda_device_count())];
  return slots[device];
}

DeviceContext* create(int device) {
  auto ctx = std::make_unique<DeviceContext>();
  ctx->device = device;
  GRIDNN_CHECK_CUDA(cudaSetDevice(device));
  GRIDNN_CHECK_CUDA(cudaGetDeviceProperties(&ctx->properties, device));
  GRIDNN_CHECK_CUDA(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
  GRIDNN_CHECK_CUBLAS(cublasCreate(&ctx->cublas));
  GRIDNN_CHECK_CUBLAS(cublasSetStream(ctx->cublas, ctx->stream));
  // cuBLAS's workspace comes from our caching allocator once, here, so no GEMM in the
  // training step calls cudaMalloc behind the allocator's back (32 MiB: NVIDIA's advice
  // for Hopper). Held for the life of the process, like the context.
  constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
  void* workspace = cuda_caching_allocator(device).allocate(kCublasWorkspaceBytes);
  GRIDNN_CHECK_CUBLAS(cublasSetWorkspace(ctx->cublas, workspace, kCublasWorkspaceBytes));
  // Precision is chosen per call by the compute type (kernels/cuda/gemm.cu: TF32 only when
  // asked for). This flag keeps split-K reductions of f16/bf16 products in f32 too, rather
  // than in the 16-bit output type.
  GRIDNN_CHECK_CUBLAS(cublasSetMathMode(
      ctx->cublas, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  return ctx.release();
}

}  // namespace

DeviceContext& context(int device) {
  Slot& s = slot(device);
  std::call_once(s.once, [&] { s.context = create(device); });
  GRIDNN_CHECK_CUDA(cudaSetDevice(device));
  return *s.context;
}

void synchronize(int device) { GRIDNN_CHECK_CUDA(cudaStreamSynchronize(context(device).stream)); }

}  // namespace gridnn::cuda
