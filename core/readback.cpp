// Readback (readback.h): a device -> pinned host copy and an event, finished later.
#include "core/readback.h"

#include <cstring>

#include "core/error.h"
#include "core/transfers.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#endif

namespace gridnn {

Readback::~Readback() {
#if GRIDNN_HAVE_CUDA
  // A destructor never throws: wait for a copy still under way, then free.
  if (event_) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  }
  if (pinned_) cudaFreeHost(pinned_);
#endif
}

void Readback::start(const Tensor& t) {
  GRIDNN_REQUIRE(t.defined(), "Readback::start: an undefined tensor");
  if (pending_) finish();
  shape_ = t.shape();
  dtype_ = t.dtype();
  pending_ = true;
  count_host_read();
  if (t.device().is_cpu()) {
    host_ = t.clone();
    return;
  }
  if (t.device().is_standin()) {  // the stand-in's memory is host memory (core/device.h)
    count_copy(Device::cpu(), t.device(), t.nbytes());
    host_ = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(host_.raw(), t.raw(), t.nbytes());
    return;
  }
#if GRIDNN_HAVE_CUDA
  const size_t bytes = t.nbytes();
  if (device_ != t.device().index && event_) {
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = nullptr;
  }
  device_ = t.device().index;
  cudaStream_t stream = cuda::context(device_).stream;  // (also makes the device current)
  if (bytes > pinned_bytes_) {
    if (pinned_) GRIDNN_CHECK_CUDA(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    GRIDNN_CHECK_CUDA(cudaHostAlloc(&pinned_, bytes, cudaHostAllocPortable));
    pinned_bytes_ = bytes;
  }
  if (!event_) {
    cudaEvent_t e = nullptr;
    GRIDNN_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
  }
  count_copy(Device::cpu(), t.device(), bytes);
  if (bytes > 0) GRIDNN_CHECK_CUDA(cudaMemcpyAsync(pinned_, t.raw(), bytes, cudaMemcpyDeviceToHost, stream));
  GRIDNN_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream));
#else
  throw Error("Readback::start: " + t.str() + " is on a CUDA device, but gridnn was built without CUDA");
#endif
}

Tensor Readback::finish() {
  GRIDNN_REQUIRE(pending_, "Readback::finish: nothing was started");
  pending_ = false;
  if (host_.defined()) {
    Tensor out = host_;
    host_ = Tensor();
    return out;
  }
  Tensor out = Tensor::empty(shape_, dtype_);
#if GRIDNN_HAVE_CUDA
  GRIDNN_CHECK_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  if (out.nbytes() > 0) std::memcpy(out.raw(), pinned_, out.nbytes());
#endif
  return out;
}

}  // namespace gridnn
