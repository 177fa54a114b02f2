// Checking macro for MPI calls (MPI builds only). A failed call throws gridnn::MpiError
// naming the call, MPI's error string, the rank, file and line. MpiSession sets
// MPI_ERRORS_RETURN on MPI_COMM_WORLD so errors come back here instead of aborting.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace gridnn::detail {
inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}
}  // namespace gridnn::detail

#define GRIDNN_CHECK_MPI(CALL)                                                                                 \
  do {                                                                                                         \
    int gridnn_status_ = (CALL);                                                                               \
    if (gridnn_status_ != MPI_SUCCESS)                                                                         \
      throw ::gridnn::MpiError(#CALL, ::gridnn::detail::mpi_error_string(gridnn_status_), __FILE__, __LINE__); \
  } while (0)
