// core/stream.h: thin owners of cudaStream_t and cudaEvent_t.
#include "core/stream.h"

#include <utility>

#include "core/cuda_check.h"

namespace gridnn::cuda {

DeviceGuard::DeviceGuard(int device) {
  GRIDNN_CHECK_CUDA(cudaGetDevice(&previous_));
  if (previous_ != device) GRIDNN_CHECK_CUDA(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }  // best effort: never throws

Stream::Stream(int device, int priority) : device_(device) {
  DeviceGuard guard(device);
  GRIDNN_CHECK_CUDA(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);  // queued work still completes
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::synchronize() const { GRIDNN_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

Event::Event(int device, bool timing) : device_(device) {
  DeviceGuard guard(device);
  GRIDNN_CHECK_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Event::record(cudaStream_t stream) { GRIDNN_CHECK_CUDA(cudaEventRecord(event_, stream)); }

void Event::wait(cudaStream_t stream) const { GRIDNN_CHECK_CUDA(cudaStreamWaitEvent(stream, event_, 0)); }

void Event::synchronize() const { GRIDNN_CHECK_CUDA(cudaEventSynchronize(event_)); }

bool Event::query() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;  // an answer, not an error
  GRIDNN_CHECK_CUDA(status);
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  GRIDNN_CHECK_CUDA(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace gridnn::cuda
