// The environment the NCCL backend's ordering relies on (docs/design.md §4), NCCL builds only.
// Part of the NCCL backend (nccl_communicator.cpp); layers use communicator.h.
//
// Set before main(), unless the user set them (linked wherever NCCL communicators can be
// made: CUDA reads the first when it creates a device's context, NCCL the second when it
// makes its first communicator):
//   CUDA_DEVICE_MAX_CONNECTIONS=32: a hardware work queue per stream (the compute stream,
//     one per communicator, NCCL's own) instead of 8 shared round-robin, in which one
//     stream's waiting work holds up the streams queued behind it.
//   NCCL_RUNTIME_CONNECT=0: NCCL connects each algorithm's channels in ncclCommInitRank
//     (collective, at the grid's creation) rather than in the first operation that uses it,
//     which would block the host until every member issued it, so that a started all-reduce
//     would block like a blocking one.
// Refused: NCCL_LAUNCH_ORDER_IMPLICIT (every kernel of a GPU after the previous one in host
// order: the deadlock of docs/design.md §4) and NCCL_COMM_BLOCKING=0.
#pragma once

#if !GRIDNN_HAVE_NCCL
#error "parallel/nccl_environment.h needs an NCCL build: include it under #if GRIDNN_HAVE_NCCL"
#endif

#include <string>

namespace gridnn::parallel {

// Throws gridnn::Error for a refused setting; warns (once) about a default the user changed.
// Every NCCL communicator calls it when it is made.
void check_nccl_environment();

// "gridnn: warning: <text>" on stderr, once per text in this process.
void nccl_warn_once(const std::string& text);

}  // namespace gridnn::parallel
