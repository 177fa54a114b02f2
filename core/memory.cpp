#include "core/memory.h"

#include <cstring>

#include "core/error.h"
#include "core/transfers.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/stream.h"
#endif

namespace gridnn {

void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, n);
    return;
  }
  if (dst_device.runs_on_host() && src_device.runs_on_host()) {  // the stand-in's memory is host memory
    count_copy(dst_device, src_device, n);
    std::memmove(dst, src, n);
    return;
  }
#if GRIDNN_HAVE_CUDA
  count_copy(dst_device, src_device, n);
  // Order the copy after the work already queued on the stream that produced the source
  // (or will consume the destination).
  const bool cross_device = dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index;
  int dev = src_device.is_cuda() ? src_device.index : dst_device.index;
  cudaStream_t stream = cuda::context(dev).stream;
  if (cross_device) {
    // The copy runs on the source device's stream, but kernels still queued on the
    // destination device's compute stream may read or write dst (an earlier op's output,
    // an allocator block just reused). Make the source stream wait for them, without
    // blocking the host: an event recorded on the destination stream.
    cuda::Event dst_idle(dst_device.index);
    dst_idle.record(cuda::context(dst_device.index).stream);
    cuda::context(dev);     // makes the source device current again
    dst_idle.wait(stream);  // (an event may be waited on from another device's stream)
  }
  GRIDNN_CHECK_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
  // To or from the host: the host may touch its side as soon as we return. Across devices:
  // the destination's compute stream does not know about a copy queued on the source's
  // stream, so its later kernels could read dst early; waiting here keeps them ordered.
  if (dst_device.is_cpu() || src_device.is_cpu() || cross_device) GRIDNN_CHECK_CUDA(cudaStreamSynchronize(stream));
#else
  throw Error("copy involving a CUDA device, but gridnn was built without CUDA");
#endif
}

void zero_bytes(void* dst, const Device& device, size_t n) {
  if (n == 0) return;
  if (device.runs_on_host()) {
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
