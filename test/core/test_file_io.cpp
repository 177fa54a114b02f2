// Atomic writes (core/file_io.h) through their write seam: short and interrupted writes still
// write the whole file; a full device and a crash part-way through a file leave the file that
// was there whole, the first with an error naming the path and the cause; an override holds
// only while it lives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "test/support/file_faults.h"
#include "test/support/temp_dir.h"

namespace gridnn {
namespace {

class FileIo : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  std::set<std::string> listing() const { return dir_.names(); }

  test::TempDir dir_{"file_io"};
};

// 1000 bytes that are not all alike.
std::string payload() {
  std::string bytes(1000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char('a' + i % 26);
  return bytes;
}

TEST_F(FileIo, ShortAndInterruptedWritesStillWriteTheWholeFile) {
  int calls = 0;
  {
    // At most 7 bytes a call, and every third call interrupted before it writes anything.
    const FileWriteOverride small([&calls](int fd, const char* data, size_t size, size_t) -> ssize_t {
      if (++calls % 3 == 0) {
        errno = EINTR;
        return -1;
      }
      return ::write(fd, data, std::min<size_t>(size, 7));
    });
    write_file_atomically(path("f"), payload());
  }
  EXPECT_GE(calls, 1000 / 7);
  EXPECT_EQ(read_whole_file(path("f")), payload());
  // The override is gone: one plain write.
  calls = 0;
  write_file_atomically(path("g"), payload());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(read_whole_file(path("g")), payload());
}

TEST_F(FileIo, AFullDeviceFailsTheWriteAndKeepsTheFileThatWasThere) {
  write_file_atomically(path("f"), "old contents");
  const FileWriteOverride full(test::full_disk_after(100));
  std::string message;
  try {
    write_file_atomically(path("f"), payload());
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message, path("f") + ": write failed: " + std::strerror(ENOSPC));
  EXPECT_EQ(read_whole_file(path("f")), "old contents");
  EXPECT_EQ(listing(), std::set<std::string>{"f"});  // the temporary file is removed
  write_file_atomically(path("small"), "fits");      // below the limit: written
  EXPECT_EQ(read_whole_file(path("small")), "fits");
}

TEST_F(FileIo, ACrashPartWayThroughAFileLeavesTheFileThatWasThere) {
  write_file_atomically(path("f"), "old contents");
  EXPECT_EXIT(
      {
        const FileWriteOverride crash(test::crash_after(200, 86));
        write_file_atomically(path("f"), payload());
      },
      ::testing::ExitedWithCode(86), "");
  EXPECT_EQ(read_whole_file(path("f")), "old contents");
  // The crash's temporary file stays, with what was written before it.
  const std::set<std::string> names = listing();
  ASSERT_EQ(names.size(), 2u);
  for (const std::string& name : names) {
    if (name != "f") {
      EXPECT_EQ(read_whole_file(path(name)), payload().substr(0, 200)) << name;
    }
  }
}

}  // namespace
}  // namespace gridnn
