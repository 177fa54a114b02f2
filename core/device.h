// Where a tensor lives: the host (CPU) or CUDA device i.
#pragma once

#include <string>

namespace gridnn {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0"

  // Parses "cpu", "cuda" or "cuda:N"; throws gridnn::Error otherwise.
  static Device parse(const std::string& s);
};

// True when gridnn was compiled with CUDA support.
bool built_with_cuda();
// Number of usable CUDA devices: 0 when built without CUDA or when the runtime reports
// any error (no driver, no device, driver too old: docs/design.md §11).
int cuda_device_count();
// Throws gridnn::Error saying what to do when `d` is a CUDA device that is not usable.
void require_device(const Device& d);
// Waits until all work queued on `d` is done (a no-op for the CPU, whose ops are synchronous).
void synchronize(const Device& d);

}  // namespace gridnn
