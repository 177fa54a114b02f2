// Internals shared by the communicator backends: the start of their messages and the
// fixed-order reduction. The argument rules, timing and record of every call are the
// Communicator base's (communicator.cpp). Not for layers: they use communicator.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace gridnn::parallel::detail {

// "all_gather on communicator \"row\" (rank 1 of 2)": the start of every message.
std::string where(const Communicator& comm, const char* op);

// The rows each rank contributes to all_gather / reduce_scatter: all equal, in.size(0) or
// out.size(0).
std::vector<int64_t> even_rows(const Communicator& comm, int64_t rows_per_rank);

// Bytes of one row of dimension 0 of t (its trailing dimensions times the element size).
int64_t row_bytes(const Tensor& t);

// acc[i] = acc[i] op x[i] for n elements of `dtype` (f32, i32, i64). Applied to the ranks'
// contributions in rank order, this is the MPI backend's fixed reduction order.
void combine(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op);

}  // namespace gridnn::parallel::detail
