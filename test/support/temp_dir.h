// A folder of its own for a test's files: made empty and unique (mkdtemp under the system's
// temporary folder, so tests running side by side never share one), removed with everything
// in it when the TempDir goes.
//
//   test::TempDir dir("checkpoint");              // /tmp/gridnn_checkpoint_XXXXXX
//   save_safetensors(dir.file("a.safetensors"), tensors);
//
// The ranks of an MPI test share rank 0's folder: shared_temp_dir (test/support/mpi_main.h).
#pragma once

#include <filesystem>
#include <set>
#include <string>

namespace gridnn::test {

class TempDir {
 public:
  // Throws std::runtime_error when the folder cannot be made.
  explicit TempDir(const std::string& what = "test");
  // `path`, made by another process, which removes it (see mpi_main.h).
  static TempDir borrowed(const std::filesystem::path& path);
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path() / name, as a string.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // The names of the files and folders in it now.
  std::set<std::string> names() const;

 private:
  TempDir(std::filesystem::path path, bool owned) : path_(std::move(path)), owned_(owned) {}
  void remove();

  std::filesystem::path path_;
  bool owned_ = false;
};

}  // namespace gridnn::test
