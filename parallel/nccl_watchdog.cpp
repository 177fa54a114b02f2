// The NCCL watchdog's thread, its host waits and the one failure path (see nccl_watchdog.h for
// the why).
#include "parallel/nccl_watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "core/cuda_check.h"
#include "core/stream.h"
#include "parallel/progress_board.h"

#if GRIDNN_HAVE_MPI
#include "parallel/mpi_session.h"
#endif

namespace gridnn::parallel {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string timeout_reason(double waited, double limit) {
  return "not complete after " + std::to_string(int(waited)) + " s (--comm-timeout " + std::to_string(int(limit)) +
         "): a peer is stopped, dead or far behind. Raise --comm-timeout if a step can legitimately take this "
         "long";
}

}  // namespace

cudaEvent_t NcclWatchdog::mark(int device, cudaStream_t stream) {
  cudaEvent_t event = take(device);
  const cudaError_t status = cudaEventRecord(event, stream);
  if (status != cudaSuccess) {
    release(device, event);
    GRIDNN_CHECK_CUDA(status);
  }
  return event;
}

void NcclWatchdog::release(int device, cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_events_[device].push_back(event);
}

void NcclWatchdog::watch(ncclComm_t comm, int device, cudaEvent_t begin, cudaStream_t stream, std::string what) {
  cudaEvent_t end = mark(device, stream);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_started_) {
    std::thread([this] { loop(); }).detach();  // lives as long as the process (never joined)
    thread_started_ = true;
  }
  pending_.push_back({comm, device, begin, end, false, Clock::now(), std::move(what), progress_step()});
}

void NcclWatchdog::forget(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->comm == comm) {
      free_events_[it->device].push_back(it->begin);
      free_events_[it->device].push_back(it->end);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void NcclWatchdog::wait_on_host(ncclComm_t comm, cudaEvent_t begin, cudaEvent_t end, const std::string& what) {
  const int64_t step = progress_step();
  bool begun = begin == nullptr;
  Clock::time_point since = Clock::now();
  for (unsigned polls = 0;; ++polls) {
    const cudaError_t state = cudaEventQuery(end);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady)
      fail(comm, what, step, std::string("CUDA reports an error: ") + cudaGetErrorString(state));
    if (!begun) {
      const cudaError_t started = cudaEventQuery(begin);
      if (started == cudaSuccess) {
        begun = true;
        since = Clock::now();
      } else if (started != cudaErrorNotReady) {
        fail(comm, what, step, std::string("CUDA reports an error: ") + cudaGetErrorString(started));
      }
    }
    ncclResult_t async = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &async);
    if (asked != ncclSuccess) async = asked;
    if (async != ncclSuccess && async != ncclInProgress)
      fail(comm, what, step, std::string("NCCL reports an error: ") + ncclGetErrorString(async));
    const double limit = comm_timeout();
    if (begun && limit > 0 && seconds_since(since) > limit)
      fail(comm, what, step, timeout_reason(seconds_since(since), limit));
    // Spin briefly (a barrier usually completes within microseconds), then sleep politely.
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void NcclWatchdog::fail(ncclComm_t comm, const std::string& what, int64_t step, const std::string& why) {
  mutex_.lock();  // the watchdog thread is not inside its loop, using `comm`; never unlocked
  fail_locked(comm, what, step, why);
}

cudaEvent_t NcclWatchdog::take(int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<cudaEvent_t>& free = free_events_[device];
    if (!free.empty()) {
      cudaEvent_t event = free.back();
      free.pop_back();
      return event;
    }
  }
  cuda::DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  GRIDNN_CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void NcclWatchdog::loop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(mutex_);
    const double limit = comm_timeout();
    for (auto it = pending_.begin(); it != pending_.end();) {
      cudaSetDevice(it->device);
      const cudaError_t state = cudaEventQuery(it->end);
      if (state == cudaSuccess) {
        free_events_[it->device].push_back(it->begin);
        free_events_[it->device].push_back(it->end);
        it = pending_.erase(it);
        continue;
      }
      if (!it->begun) {
        const cudaError_t started = cudaEventQuery(it->begin);
        if (started == cudaSuccess) {
          it->begun = true;
          it->start = Clock::now();
        } else if (started != cudaErrorNotReady) {
          fail_locked(it->comm, it->what, it->step,
                      std::string("CUDA reports an error: ") + cudaGetErrorString(started));
        }
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(it->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail_locked(it->comm, it->what, it->step, std::string("NCCL reports an error: ") + ncclGetErrorString(async));
      if (state != cudaErrorNotReady)
        fail_locked(it->comm, it->what, it->step, std::string("CUDA reports an error: ") + cudaGetErrorString(state));
      if (it->begun && limit > 0 && seconds_since(it->start) > limit)
        fail_locked(it->comm, it->what, it->step, timeout_reason(seconds_since(it->start), limit));
      ++it;
    }
  }
}

void NcclWatchdog::fail_locked(ncclComm_t comm, const std::string& what, int64_t step, const std::string& why) {
  ncclCommAbort(comm);
  const std::string message = "NCCL communication timeout or failure: " + what + ", step " + std::to_string(step) +
                              ": " + why + ". Ending the job";
#if GRIDNN_HAVE_MPI
  MpiSession::fail_job(message, kCommTimeoutExitCode);
#else
  std::fprintf(stderr, "gridnn: error: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(kCommTimeoutExitCode);
#endif
}

NcclWatchdog& nccl_watchdog() {
  static auto* watchdog = new NcclWatchdog();
  return *watchdog;
}

}  // namespace gridnn::parallel
