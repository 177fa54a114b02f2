// Errors.
//
// gridnn::Error is a user error: a bad shape, a bad grid, a bad file. Its message says
// what to change. BackendError (and one subclass per library) is a failed CUDA, cuBLAS,
// cuDNN, NCCL or MPI call; its message names the call, the rank, the file and the line.
// The checking macros live beside each library: core/cuda_check.h, parallel/mpi_check.h.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gridnn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An Error that every rank of a job throws alike, at the same point and before the ranks wait
// for each other (a --grid that does not match the job's size): the job ends with status 1 on
// every rank and one message, without MPI_Abort, so that a launcher reports the status gridnn
// chose rather than ranks it killed (parallel/mpi_session.h).
class AllRanksError : public Error {
 public:
  explicit AllRanksError(const std::string& what) : Error(what) {}
};

class BackendError : public Error {
 public:
  BackendError(const char* library, const std::string& call, const std::string& detail, const char* file, int line);
  const std::string& call() const { return call_; }
  int rank() const { return rank_; }

 private:
  std::string call_;
  int rank_;
};

// NAME is a class name, which cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define GRIDNN_DECLARE_BACKEND_ERROR(NAME, LIBRARY)                                      \
  class NAME : public BackendError {                                                     \
   public:                                                                               \
    NAME(const std::string& call, const std::string& detail, const char* file, int line) \
        : BackendError(LIBRARY, call, detail, file, line) {}                             \
  };
// NOLINTEND(bugprone-macro-parentheses)
GRIDNN_DECLARE_BACKEND_ERROR(CudaError, "CUDA")
GRIDNN_DECLARE_BACKEND_ERROR(CublasError, "cuBLAS")
GRIDNN_DECLARE_BACKEND_ERROR(CudnnError, "cuDNN")
GRIDNN_DECLARE_BACKEND_ERROR(NcclError, "NCCL")
GRIDNN_DECLARE_BACKEND_ERROR(MpiError, "MPI")
#undef GRIDNN_DECLARE_BACKEND_ERROR

// The rank named in backend errors; -1 (the default) means "not running under MPI".
void set_error_rank(int rank);
int error_rank();

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace gridnn

// Throws gridnn::Error with the streamed message parts when COND is false.
#define GRIDNN_REQUIRE(COND, ...)                                              \
  do {                                                                         \
    if (!(COND)) throw ::gridnn::Error(::gridnn::detail::concat(__VA_ARGS__)); \
  } while (0)
