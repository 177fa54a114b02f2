// Checking macro for NCCL calls (NCCL builds only: include it under #if GRIDNN_HAVE_NCCL).
// A failed call throws gridnn::NcclError naming the call, NCCL's error string (plus the
// text of ncclGetLastError, which says which argument or peer was wrong, when NCCL set
// one), the rank, file and line.
#pragma once

#if !GRIDNN_HAVE_NCCL
#error "parallel/nccl_check.h needs an NCCL build: include it under #if GRIDNN_HAVE_NCCL"
#endif

#include <nccl.h>

#include <string>

#include "core/error.h"

namespace gridnn::detail {
inline std::string nccl_error_string(ncclResult_t status) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(nullptr);  // this thread's last error message
  if (last && *last) text += std::string(": ") + last;
  return text;
}
}  // namespace gridnn::detail

#define GRIDNN_CHECK_NCCL(CALL)                                                                                  \
  do {                                                                                                           \
    ncclResult_t gridnn_status_ = (CALL);                                                                        \
    if (gridnn_status_ != ncclSuccess)                                                                           \
      throw ::gridnn::NcclError(#CALL, ::gridnn::detail::nccl_error_string(gridnn_status_), __FILE__, __LINE__); \
  } while (0)
