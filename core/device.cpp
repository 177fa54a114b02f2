#include "core/device.h"

#include <fstream>
#include <string>

#include "core/error.h"
#include "core/test_switches.h"

#if GRIDNN_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_context.h"
#endif

namespace gridnn {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    std::string n = s.substr(5);
    bool digits = !n.empty() && n.size() < 6 && n.find_first_not_of("0123456789") == std::string::npos;
    if (digits) return cuda(std::stoi(n));
  }
  throw Error("unknown device '" + s + "'; use cpu, cuda or cuda:N");
}

bool built_with_cuda() { return GRIDNN_HAVE_CUDA != 0; }

namespace {
// The devices the CUDA runtime reports (0 without CUDA or on any error).
int real_device_count() {
#if GRIDNN_HAVE_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls start clean
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

// The stand-in's condition (device.h), decided once.
bool standin_on() {
  static const bool on = test_switches().device_standin && real_device_count() == 0;
  return on;
}
}  // namespace

Device Device::cuda(int i) { return {standin_on() ? Kind::cuda_standin : Kind::cuda, i}; }

int cuda_device_count() { return standin_on() ? 1 : real_device_count(); }

void require_device(const Device& d) {
  if (d.is_cpu()) return;
  GRIDNN_REQUIRE(built_with_cuda() || d.is_standin(), "device ", d.str(),
                 " requested but gridnn was built without CUDA; rebuild with -DGRIDNN_CUDA=ON "
                 "(needs nvcc) or use --device cpu");
  int n = cuda_device_count();
  GRIDNN_REQUIRE(n > 0, "device ", d.str(),
                 " requested but no usable CUDA device was found (no GPU, or the driver is "
                 "missing or too old); use --device cpu");
  GRIDNN_REQUIRE(d.index >= 0 && d.index < n, "device ", d.str(), " does not exist; this machine has ", n,
                 " CUDA device(s): cuda:0..cuda:", n - 1);
}

int64_t available_memory_bytes(const Device& d) {
  if (d.runs_on_host()) {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    while (meminfo >> key >> kib)
      if (key == "MemAvailable:")
        return kib * 1024;
      else
        meminfo.ignore(256, '\n');
    return 0;
  }
#if GRIDNN_HAVE_CUDA
  require_device(d);
  int previous = 0;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(d.index) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaSetDevice(previous);
  return int64_t(free_bytes);
#else
  return 0;
#endif
}

void synchronize(const Device& d) {
  if (d.runs_on_host()) return;
#if GRIDNN_HAVE_CUDA
  cuda::synchronize(d.index);
#endif
}

}  // namespace gridnn
