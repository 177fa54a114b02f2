// Where a tensor lives: the host (CPU) or CUDA device i, real or the device stand-in.
#pragma once

#include <cstdint>
#include <string>

namespace gridnn {

// The device stand-in (docs/design.md §9): with the test switch GRIDNN_DEVICE_STANDIN=1
// (core/test_switches.h) on a machine whose CUDA runtime reports no device (or a build without
// CUDA), every CUDA device made (Device::cuda, Device::parse) is of the kind cuda_standin, and
// cuda:0 exists. Its memory is host memory, copies to and from it are plain copies (counted as
// device transfers, as real ones are), synchronize() has nothing to wait for, and every op on it
// runs the CPU's body (runs_on_host()); everything else treats it as a GPU (is_cuda()): no host
// reads of its tensors, labels not checked on it, the MPI backend staging it through pinned
// buffers. The gpu tests run on it on machines without a GPU, so a test asserting a device
// contract the code no longer has fails there (test/support/gpu_test.h). Never active where a
// real CUDA device is present.
struct Device {
  enum class Kind { cpu, cuda, cuda_standin };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  // CUDA device i: of the kind cuda_standin while the stand-in is on, cuda otherwise.
  static Device cuda(int i = 0);
  bool is_cpu() const { return kind == Kind::cpu; }
  // A GPU, real or the stand-in.
  bool is_cuda() const { return kind != Kind::cpu; }
  bool is_standin() const { return kind == Kind::cuda_standin; }
  // Its memory is host memory and its ops run the CPU's bodies: the CPU and the stand-in.
  bool runs_on_host() const { return kind != Kind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0" (the stand-in too)

  // Parses "cpu", "cuda" or "cuda:N"; throws gridnn::Error otherwise.
  static Device parse(const std::string& s);
};

// True when gridnn was compiled with CUDA support.
bool built_with_cuda();
// Number of usable CUDA devices: 1 with the device stand-in; 0 when built without CUDA or when
// the runtime reports any error (no driver, no device, driver too old: docs/design.md §11).
int cuda_device_count();
// Throws gridnn::Error saying what to do when `d` is a CUDA device that is not usable.
void require_device(const Device& d);
// Waits until all work queued on `d` is done (a no-op for the CPU, whose ops are synchronous).
void synchronize(const Device& d);
// The bytes `d` can still give: a GPU's free memory (cudaMemGetInfo), the host's MemAvailable
// (/proc/meminfo) for the CPU and the device stand-in; 0 when it cannot be read.
int64_t available_memory_bytes(const Device& d);

}  // namespace gridnn
