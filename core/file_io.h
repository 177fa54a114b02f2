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

#include <cstddef>
#include <string>

namespace gridnn {

std::string read_whole_file(const std::string& path);
void write_file_atomically(const std::string& path, const std::string& bytes);

// Crash-safety tests only: the next atomic write in this process (a checkpoint's
// save_safetensors, typically) writes the first `bytes` bytes of its temporary file and then
// ends the process on the spot (std::_Exit(exit_code)), as a crash or a kill in the middle
// of a write would. Independently, the environment variable GRIDNN_TEST_DISK_FULL_AFTER=N
// makes every atomic write fail with ENOSPC once N bytes of it are written, as a full
// device does.
void inject_save_crash_for_testing(size_t bytes, int exit_code = 86);

}  // namespace gridnn
