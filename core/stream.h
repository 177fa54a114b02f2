// Explicit CUDA streams and events (CUDA builds only; docs/design.md §2: communication runs on its
// own stream, ordered against compute by events).
//
//   cuda::Stream comm(device);            // non-blocking stream on `device`
//   cuda::Event ready(device);
//   ready.record(cuda::context(device).stream);  // compute has produced the gradients
//   ready.wait(comm);                     // comm work queued after this waits for them
//
// Stream and Event own their handle (movable, not copyable). Destructors never throw.
// DeviceGuard makes a device current for a scope and restores the previous one.
#pragma once

#include <cuda_runtime.h>

namespace gridnn::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class Stream {
 public:
  // A stream that does not synchronize with the legacy default stream. Lower numbers are
  // higher priority; 0 is the default (see cudaDeviceGetStreamPriorityRange).
  explicit Stream(int device, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t handle() const { return stream_; }  // nullptr after being moved from
  int device() const { return device_; }
  void synchronize() const;  // waits for all work queued on this stream

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  // timing = false (the default) creates the event with cudaEventDisableTiming, which
  // makes record/wait cheaper; elapsed_ms needs timing = true on both events.
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t handle() const { return event_; }
  int device() const { return device_; }

  void record(cudaStream_t stream);  // captures the work queued on `stream` so far
  void record(const Stream& stream) { record(stream.handle()); }
  // Work queued on `stream` after this call starts only once the recorded work is done.
  void wait(cudaStream_t stream) const;
  void wait(const Stream& stream) const { wait(stream.handle()); }
  void synchronize() const;  // blocks the host until the recorded work is done
  bool query() const;        // true when the recorded work is done (or nothing was recorded)

  // Milliseconds between two recorded, completed timing events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

}  // namespace gridnn::cuda
