// Faults for the atomic writes of core/file_io.h, installed with a FileWriteOverride: a
// device that fills up, and a process that dies, part-way through a file. Each writes the
// file's first bytes for real, so what a fault leaves behind is what a real one would.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/file_io.h"

namespace gridnn::test {

// Every file gets its first `bytes` bytes, then a write fails with ENOSPC, as on a full
// device.
inline FileWrite full_disk_after(size_t bytes) {
  return [bytes](int fd, const char* data, size_t size, size_t offset) -> ssize_t {
    if (offset >= bytes) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, data, std::min(size, bytes - offset));
  };
}

// The first file to reach `bytes` bytes gets them, then the process ends on the spot
// (std::_Exit(exit_code): no destructors, no cleanup), as a crash or a kill would.
inline FileWrite crash_after(size_t bytes, int exit_code) {
  return [bytes, exit_code](int fd, const char* data, size_t size, size_t offset) -> ssize_t {
    if (offset >= bytes) std::_Exit(exit_code);
    return ::write(fd, data, std::min(size, bytes - offset));
  };
}

}  // namespace gridnn::test
