// Reading a small device tensor back without waiting for it (docs/design.md §2): the
// training losses of a logging interval are copied to the host while the next steps run,
// and looked at one interval later, so the host never waits for the GPU to drain.
//
//   Readback r;
//   r.start(losses);           // queued on the device's compute stream; returns at once
//   ... more steps ...
//   Tensor host = r.finish();  // the values as they were at start(); waits only if the
//                              // copy has not arrived yet
//
// On the host start() copies at once. On a CUDA device the copy goes into page-locked
// memory owned by the Readback (allocated once, grown when needed), with an event after it.
// One copy at a time: start() finishes the previous one first. Counted when it is started
// (core/transfers.h): a host read, and a download for a device tensor.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace gridnn {

class Readback {
 public:
  Readback() = default;
  ~Readback();
  Readback(const Readback&) = delete;
  Readback& operator=(const Readback&) = delete;

  void start(const Tensor& t);
  bool pending() const { return pending_; }
  // The tensor given to start(), on the host (an error when nothing was started).
  Tensor finish();

 private:
  Shape shape_;
  DType dtype_ = DType::f32;
  Tensor host_;  // a host tensor's copy
  // A device tensor's copy (CUDA builds only): pinned memory, a cudaEvent_t recorded after it.
  [[maybe_unused]] void* pinned_ = nullptr;
  [[maybe_unused]] size_t pinned_bytes_ = 0;
  [[maybe_unused]] void* event_ = nullptr;
  [[maybe_unused]] int device_ = -1;
  bool pending_ = false;
};

}  // namespace gridnn
