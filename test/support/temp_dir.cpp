#include "test/support/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace gridnn::test {

TempDir::TempDir(const std::string& what) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("gridnn_" + what + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("TempDir: cannot make " + pattern + ": " + std::strerror(errno));
  path_ = pattern;
  owned_ = true;
}

std::set<std::string> TempDir::names() const {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) names.insert(entry.path().filename());
  return names;
}

TempDir TempDir::borrowed(const std::filesystem::path& path) { return TempDir(path, false); }

TempDir::~TempDir() { remove(); }

TempDir::TempDir(TempDir&& other) noexcept
    : path_(std::move(other.path_)), owned_(std::exchange(other.owned_, false)) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::move(other.path_);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

void TempDir::remove() {
  if (!owned_) return;
  std::error_code ignored;  // a destructor reports nothing; a leftover folder is harmless
  std::filesystem::remove_all(path_, ignored);
  owned_ = false;
}

}  // namespace gridnn::test
