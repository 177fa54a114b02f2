#include "core/error.h"

#include <atomic>

namespace gridnn {
namespace {
std::atomic<int> g_rank{-1};

std::string backend_message(const char* library, const std::string& call, const std::string& detail, const char* file,
                            int line) {
  std::ostringstream os;
  os << library << " call failed";
  int rank = g_rank.load();
  if (rank >= 0) os << " on rank " << rank;
  os << ": " << call << " returned " << detail << " (" << file << ":" << line << ")";
  return os.str();
}
}  // namespace

BackendError::BackendError(const char* library, const std::string& call, const std::string& detail, const char* file,
                           int line)
    : Error(backend_message(library, call, detail, file, line)), call_(call), rank_(g_rank.load()) {}

void set_error_rank(int rank) { g_rank.store(rank); }
int error_rank() { return g_rank.load(); }

}  // namespace gridnn
