// Whole-file reads and atomic writes (core/file_io.h).
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.h"

namespace gridnn {
namespace {

template <class... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... parts) {
  throw Error(detail::concat(path, ": ", parts...));
}

std::string errno_text(int err) { return std::strerror(err); }

// A file descriptor closed on scope exit (unless closed before).
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and returns close()'s result (0, or -1 with errno set).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Removes the temporary file on scope exit unless it was renamed into place.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

// The write call of every atomic write (FileWrite): ::write unless overridden.
FileWrite& file_write() {
  static FileWrite write = [](int fd, const char* data, size_t size, size_t /*offset*/) {
    return ::write(fd, data, size);
  };
  return write;
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  const FileWrite& write = file_write();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "write failed: ", errno_text(errno));
    done += size_t(n);
  }
}

// The process umask, read without changing it: umask() can only be read by setting it,
// which would race with other threads creating files. Linux reports it in
// /proc/self/status; where that is unavailable, assume the usual 022.
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0) return mode_t(std::strtoul(line.c_str() + 6, nullptr, 8));
  return 022;
}

// Makes the rename durable. Filesystems that cannot sync a directory (EINVAL) are tolerated.
void sync_directory(const std::string& dir, const std::string& path) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "written, but cannot open directory '", dir, "' to sync it: ", errno_text(errno));
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    fail(path, "written, but syncing directory '", dir, "' failed: ", errno_text(errno));
}

}  // namespace

std::string read_whole_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open for reading: ", errno_text(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(path, "cannot stat: ", errno_text(errno));
  if (!S_ISREG(info.st_mode)) fail(path, "is not a regular file");
  std::string bytes(size_t(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed: ", errno_text(errno));
    if (n == 0) fail(path, "file shrank while being read (", done, " of ", bytes.size(), " bytes)");
    done += size_t(n);
  }
  return bytes;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  // mkstemp replaces the Xs with random letters and creates the file with O_EXCL.
  std::string temp = path + ".tmp.XXXXXX";
  FileDescriptor fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot create temporary file '", temp, "': ", errno_text(errno));
  TempFileGuard guard(temp);
  // mkstemp creates the file readable by its owner only: give it the mode any new file gets.
  if (::fchmod(fd.get(), 0666 & ~current_umask()) != 0)
    fail(path, "cannot set the mode of '", temp, "': ", errno_text(errno));
  write_all(fd.get(), bytes, path);
  if (::fsync(fd.get()) != 0) fail(path, "fsync of '", temp, "' failed: ", errno_text(errno));
  if (fd.close() != 0) fail(path, "closing '", temp, "' failed: ", errno_text(errno));
  if (::rename(temp.c_str(), path.c_str()) != 0) fail(path, "cannot rename '", temp, "' over it: ", errno_text(errno));
  guard.release();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  sync_directory(dir.empty() ? "." : dir, path);
}

FileWriteOverride::FileWriteOverride(FileWrite write) : previous_(std::move(file_write())) {
  file_write() = std::move(write);
}

FileWriteOverride::~FileWriteOverride() { file_write() = std::move(previous_); }

}  // namespace gridnn
