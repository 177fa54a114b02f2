// The NCCL watchdog: the time limit of parallel/progress_board.h for device tensors (NCCL
// builds only). Part of the NCCL backend (nccl_communicator.cpp); layers use communicator.h.
//
// Most NCCL operations are waited for by CUDA (the compute stream waits on them, and the host
// then synchronizes somewhere else, e.g. reading the loss through Tensor::to_host), so no
// wait of the backend sees them time out; instead a thread looks, every 100 ms, at each
// operation enqueued: done (its end event has completed), under way, or not begun (its
// begin event, recorded on the communicator's stream just before it, has not completed: its
// stream is still busy with the compute work it waits for or with the communicator's
// earlier operations, docs/design.md §4). One under way for longer than comm_timeout(), or
// a communicator that reports an asynchronous error, ends the job (fail) with a message
// naming the operation, communicator, layer and step. As PyTorch's NCCL watchdog does.
// The waits of the backend that do block the host (barrier() without a host communicator,
// the destructor) poll the same way (wait_on_host) and end the job through the same fail.
#pragma once

#if !GRIDNN_HAVE_NCCL
#error "parallel/nccl_watchdog.h needs an NCCL build: include it under #if GRIDNN_HAVE_NCCL"
#endif

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gridnn::parallel {

class NcclWatchdog {
 public:
  // An event of the pool recorded on `stream` now; give it back with release() unless it
  // is handed to watch().
  cudaEvent_t mark(int device, cudaStream_t stream);
  void release(int device, cudaEvent_t event);

  // Watches the operation just enqueued on `stream` after mark() recorded `begin`.
  void watch(ncclComm_t comm, int device, cudaEvent_t begin, cudaStream_t stream, std::string what);

  // Stops watching `comm` (it is about to be destroyed or aborted).
  void forget(ncclComm_t comm);

  // Blocks the host until `end` (an event recorded after operation `what` of `comm`) has
  // completed, polling it and ncclCommGetAsyncError; the time limit counts from when
  // `begin` (recorded just before it; null: from now) has completed. A failure or the limit
  // ends the job (fail). Never throws.
  void wait_on_host(ncclComm_t comm, cudaEvent_t begin, cudaEvent_t end, const std::string& what);

  // Ends the job for operation `what` of `comm` (aborted first, which frees the GPU's
  // kernels waiting for peers): "NCCL communication timeout or failure: <what>, step S:
  // <why>". The one place that does; any thread may call it.
  [[noreturn]] void fail(ncclComm_t comm, const std::string& what, int64_t step, const std::string& why);

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    ncclComm_t comm;
    int device;
    cudaEvent_t begin, end;
    bool begun;               // begin has completed (seen at `start`)
    Clock::time_point start;  // when begin was seen complete (the enqueue, until then)
    std::string what;
    int64_t step;
  };

  cudaEvent_t take(int device);
  void loop();
  [[noreturn]] static void fail_locked(ncclComm_t comm, const std::string& what, int64_t step, const std::string& why);

  std::mutex mutex_;
  bool thread_started_ = false;
  std::list<Pending> pending_;
  std::map<int, std::vector<cudaEvent_t>> free_events_;  // by device, reused
};

// The process's watchdog. Never destroyed: its thread may still run while static destructors
// do.
NcclWatchdog& nccl_watchdog();

}  // namespace gridnn::parallel
