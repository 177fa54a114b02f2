// Guard regions around the op harness's memory, as ggml's test-backend-ops puts sentinels
// between its tensors: while a GuardedMemory lives, every block allocated on its devices
// (inputs, outputs and whatever the op allocates inside) comes with 256 bytes of a known
// pattern before and after it (set_front_allocator, core/allocator.h). check() then finds a
// write outside any block: the pattern changed in a live block, or in one freed since the
// last check. A device's guards are read back by copies to the host, so the same check holds
// for the CPU, cuda:0 and the device stand-in.
//
//   GuardedMemory guard({Device::cpu()});
//   Tensors out = c.run(in);
//   if (auto r = guard.check({{"output 0", out[0]}}); !r) ...
//   // "wrote outside its memory: output 0 (f32[3, 5, 7] on cpu): 4 bytes written past its end ..."
//
// Blocks keep their guards after the GuardedMemory is gone, until they are freed.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace gridnn::test {

class GuardedMemory {
 public:
  explicit GuardedMemory(const std::vector<Device>& devices);
  ~GuardedMemory();
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;

  // Success, or each block whose guards changed since the last check (by the name of the
  // tensor in `named` it holds, if any), which side and how many bytes. The guards are
  // written anew, so a later check reports only later writes.
  ::testing::AssertionResult check(const std::vector<std::pair<std::string, Tensor>>& named = {});

 private:
  std::vector<Device> devices_;
};

}  // namespace gridnn::test
