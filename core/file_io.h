// Files read and written whole.
//
// read_whole_file: the bytes of a regular file; gridnn::Error naming it when it cannot be
// opened, is not a regular file, or shrinks while being read.
//
// write_file_atomically: the bytes go to a temporary file beside `path` (created
// exclusively under a random name by mkstemp, so ranks on different hosts writing to one
// shared filesystem never share one; given the mode any new file gets, 0666 less the
// umask), which is fsynced, closed and renamed over `path`; then the folder is synced so the
// rename is durable. A crash at any point leaves `path` as it was or whole, never half
// written; a failure removes the temporary file and throws gridnn::Error naming `path` and
// the cause (disk full, read-only, missing folder). Checkpoints, PNG images and
// gridnn-predict's tables are written this way.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>

namespace gridnn {

std::string read_whole_file(const std::string& path);
void write_file_atomically(const std::string& path, const std::string& bytes);

// The call that puts the bytes of write_file_atomically's temporary file on the device, with
// ::write's contract (the bytes written, or -1 with errno set); `offset` says how many bytes of
// this file are written already. It is ::write itself unless a FileWriteOverride replaces it:
// tests do, to fail or end the process part-way through a file as a full device or a kill
// would (test/support/file_faults.h).
using FileWrite = std::function<ssize_t(int fd, const char* data, size_t size, size_t offset)>;

// Makes `write` the call of every atomic write of the process while it lives (the previous
// one after). Installed before the writes it is meant for begin and dropped after they end.
class FileWriteOverride {
 public:
  explicit FileWriteOverride(FileWrite write);
  ~FileWriteOverride();
  FileWriteOverride(const FileWriteOverride&) = delete;
  FileWriteOverride& operator=(const FileWriteOverride&) = delete;

 private:
  FileWrite previous_;
};

}  // namespace gridnn
