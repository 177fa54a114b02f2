// The NCCL backend's environment: the defaults set before main(), the refusals and the
// warnings (see nccl_environment.h for the why).
#include "parallel/nccl_environment.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace gridnn::parallel {

namespace {

// Before main(); a value the user set is kept (and warned about, check_nccl_environment()).
[[maybe_unused]] const bool g_environment_defaults = [] {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  return true;
}();

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

}  // namespace

void nccl_warn_once(const std::string& text) {
  static std::mutex mutex;
  static std::vector<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  for (const std::string& s : said)
    if (s == text) return;
  said.push_back(text);
  std::fprintf(stderr, "gridnn: warning: %s\n", text.c_str());
  std::fflush(stderr);
}

void check_nccl_environment() {
  const char* implicit = std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
  GRIDNN_REQUIRE(!implicit || std::string(implicit).empty() || std::string(implicit) == "0",
                 "NCCL_LAUNCH_ORDER_IMPLICIT=", implicit,
                 ": NCCL would then launch every kernel of a GPU after "
                 "the previous one in the host's order, whichever its communicator; gridnn's ranks issue their "
                 "communicators' operations in different orders (pipeline stages), which can deadlock that way. "
                 "Unset it (docs/design.md §4)");
  GRIDNN_REQUIRE(!env_is("NCCL_COMM_BLOCKING", "0"),
                 "NCCL_COMM_BLOCKING=0: gridnn's NCCL backend needs blocking NCCL communicators; unset it");
  if (const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); connections && std::atoi(connections) < 32)
    nccl_warn_once(std::string("CUDA_DEVICE_MAX_CONNECTIONS=") + connections +
                   ": streams share hardware work queues, where one NCCL stream's waiting operation can hold up "
                   "another's and deadlock ranks that issue operations in different orders; gridnn sets 32 unless "
                   "told otherwise (docs/design.md §4)");
  if (const char* connect = std::getenv("NCCL_RUNTIME_CONNECT"); connect && std::string(connect) != "0")
    nccl_warn_once(std::string("NCCL_RUNTIME_CONNECT=") + connect +
                   ": NCCL connects an algorithm's channels in its first operation, blocking the host until every "
                   "member has issued it, so a first start_all_reduce can block like a blocking all-reduce; gridnn "
                   "sets 0 unless told otherwise (docs/design.md §4)");
}

}  // namespace gridnn::parallel
