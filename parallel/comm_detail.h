// Internals shared by the communicator backends (self, MPI): argument checks whose messages
// name the communicator and the operation, the fixed-order reduction, and the recording of
// each call in comm_log(). Not for layers: they use communicator.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace gridnn::parallel::detail {

// "all_gather on communicator \"row\" (rank 1 of 2)": the start of every message.
std::string where(const Communicator& comm, const char* op);

void check_defined(const Communicator& comm, const char* op, const Tensor& t, const char* what);
// Reductions support f32, i32 and i64 (gridnn has no f64); gathers, broadcasts and
// send_recv move any dtype byte for byte.
void check_reducible(const Communicator& comm, const char* op, DType dtype);
// The rows each rank contributes to all_gather / reduce_scatter (all equal: in.size(0) or
// out.size(0)) or to their v-variants (`rows`, checked: one entry per rank, none negative).
std::vector<int64_t> even_rows(const Communicator& comm, int64_t rows_per_rank);
void check_rows(const Communicator& comm, const char* op, const std::vector<int64_t>& rows);
// `part` holds rows[rank()] rows and `whole` their sum, same dtype and trailing dimensions.
// `part_name` / `whole_name` are "in" / "out" for gathers, "out" / "in" for scatters.
void check_blocks(const Communicator& comm, const char* op, const Tensor& part, const char* part_name,
                  const Tensor& whole, const char* whole_name, const std::vector<int64_t>& rows);
void check_rank(const Communicator& comm, const char* op, int rank, const char* role, bool allow_none);

// Bytes of one row of dimension 0 of t (its trailing dimensions times the element size).
int64_t row_bytes(const Tensor& t);

// acc[i] = acc[i] op x[i] for n elements of `dtype` (f32, i32, i64). Applied to the ranks'
// contributions in rank order, this is the fixed reduction order of every backend.
void combine(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op);

// Adds a CommRecord for a call that began at `start`.
using Clock = std::chrono::steady_clock;
// `received`: send_recv's elements received.
void record(const Communicator& comm, const char* op, int64_t elements, DType dtype, Clock::time_point start,
            int64_t received = 0);
// The same for a call that spent `seconds` in all, labelled `layer` (non-blocking calls).
void record_seconds(const Communicator& comm, const char* op, int64_t elements, DType dtype, double seconds,
                    const std::string& layer, int64_t received = 0);

}  // namespace gridnn::parallel::detail
