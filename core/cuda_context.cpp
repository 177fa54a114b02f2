// Per-device CUDA state (core/cuda_context.h). Each device's context is built once, on
// first use, under a std::call_once (a failed build releases what it created, throws, and
// is retried by the next call). Contexts are never destroyed: tensors and allocators may
// outlive main(), and destroying streams or cuBLAS handles during static destruction is
// unsafe.
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

// What create() has made so far; released again if a later step throws, so a failed
// build leaks nothing (and the retry by the next call starts from scratch).
struct PartialContext {
  std::unique_ptr<DeviceContext> ctx = std::make_unique<DeviceContext>();
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  PartialContext() = default;
  PartialContext(const PartialContext&) = delete;
  PartialContext& operator=(const PartialContext&) = delete;
  ~PartialContext() {  // best effort, never throws; nothing to do after release()
    if (!ctx) return;
    if (ctx->cublas) cublasDestroy(ctx->cublas);
    if (workspace) cuda_caching_allocator(ctx->device).deallocate(workspace, workspace_bytes);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
  }
  DeviceContext* release() { return ctx.release(); }
};

DeviceContext* create(int device) {
  PartialContext made;
  DeviceContext* ctx = made.ctx.get();
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
  made.workspace = cuda_caching_allocator(device).allocate(kCublasWorkspaceBytes);
  made.workspace_bytes = kCublasWorkspaceBytes;
  GRIDNN_CHECK_CUBLAS(cublasSetWorkspace(ctx->cublas, made.workspace, kCublasWorkspaceBytes));
  // Precision is chosen per call by the compute type (kernels/cuda/gemm.cu: TF32 only when
  // asked for). This flag keeps split-K reductions of f16/bf16 products in f32 too, rather
  // than in the 16-bit output type.
  GRIDNN_CHECK_CUBLAS(cublasSetMathMode(
      ctx->cublas, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  return made.release();
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
