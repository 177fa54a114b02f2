#include "core/memory.h"

#include <cstring>

#include "core/error.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#endif

namespace gridnn {

void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, n);
    return;
  }
#if GRIDNN_HAVE_CUDA
  // Order the copy after the work already queued on the stream that produced the source
  // (or will consume the destination).
  int dev = src_device.is_cuda() ? src_device.index : dst_device.index;
  cudaStream_t stream = cuda::context(dev).stream;
  GRIDNN_CHECK_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
  if (dst_device.is_cpu() || src_device.is_cpu()) GRIDNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index)
    GRIDNN_CHECK_CUDA(cudaStreamSynchronize(stream));
#else
  throw Error("copy involving a CUDA device, but gridnn was built without CUDA");
#endif
}

void zero_bytes(void* dst, const Device& device, size_t n) {
  if (n == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, 0, n);
    return;
  }
#if GRIDNN_HAVE_CUDA
  GRIDNN_CHECK_CUDA(cudaMemsetAsync(dst, 0, n, cuda::context(device.index).stream));
#else
  throw Error("zeroing CUDA memory, but gridnn was built without CUDA");
#endif
}

}  // namespace gridnn
