// The NCCL backend of Communicator (NCCL builds only: include it under #if GRIDNN_HAVE_NCCL).
//
// Device tensors (on the communicator's CUDA device) go through NCCL; host tensors go to a
// wrapped host communicator (the MPI one of the same group), so a layer may pass either.
// One call takes tensors of one kind: all on this communicator's device, or all on the host.
//
// Streams and ordering (docs/design.md §2 and §4, the rule in parallel/device_order.h): NCCL
// runs on the communicator's own CUDA stream (highest priority), which runs this
// communicator's operations in the order they are issued. Before each operation that stream
// waits (cudaStreamWaitEvent) on an event recorded on the device's compute stream, so NCCL
// reads what the kernels before the call wrote; after a blocking call the compute stream
// waits on an event recorded on the NCCL stream, so the kernels after the call read what
// NCCL wrote. Nothing blocks the host: a call returns once the operation is enqueued
// (Tensor::to_host and copy_from synchronize the compute stream when the host reads).
// start_all_reduce enqueues the same way but lets the compute stream run on until wait();
// test() asks the event (cudaEventQuery). No operation waits for another communicator's
// except through the compute stream, so a started all-reduce holds up nothing but later
// operations of its own communicator; a send_recv behind one not yet waited for is refused.
// Each communicator's kernels use at most nccl_cta_limit() CTAs (ncclConfig_t::maxCTAs, no
// thread-block clusters) so that a kernel of every communicator a rank holds fits on the GPU
// at once. The environment (nccl_environment.h): CUDA_DEVICE_MAX_CONNECTIONS=32 and
// NCCL_RUNTIME_CONNECT=0 unless set (warned about when set otherwise);
// NCCL_LAUNCH_ORDER_IMPLICIT and NCCL_COMM_BLOCKING=0 are refused. NCCL_MAX_CTAS,
// NCCL_MIN_CTAS, NCCL_MIN_NCHANNELS and NCCL_CGA_CLUSTER_SIZE override the CTA limit, at the
// risk docs/design.md §4 describes.
//
// Time limit (parallel/progress_board.h's comm_timeout(), --comm-timeout): a watchdog thread
// (nccl_watchdog.h) looks at every operation enqueued; one that has begun (its stream reached
// it) and is not complete after the limit, or an asynchronous NCCL error, ends the job with a
// message naming the operation, communicator, layer and step. The waits that block the host
// here (barrier() without a host communicator, the destructor) poll the event and
// ncclCommGetAsyncError under the same limit, and test() / wait() check
// ncclCommGetAsyncError; all end the job the same way.
//
// Counting: every call is recorded in comm_log() with the MPI backend's operation names and
// element conventions (communicator.h); for device tensors `seconds` is the host time spent
// enqueueing the operation, not its duration on the GPU (that would need a synchronization
// per call). Host-tensor calls are recorded by the wrapped communicator under its own name
// (make_nccl_communicator over MPI gives it this communicator's name).
//
// Determinism: NCCL's all-reduce and reduce-scatter are deterministic for a fixed number of
// ranks, topology, algorithm and protocol (pin NCCL_ALGO / NCCL_PROTO to keep them fixed
// across machines), and every rank receives the same bytes; but the summation order is
// NCCL's (ring or tree, chunked), not the MPI backend's rank order, so results are not
// bitwise those of the MPI backend (they agree to floating-point reassociation). max of a
// NaN follows NCCL, not MPI_MAX. reduce_scatterv and all_gatherv are grouped ncclReduce /
// ncclBroadcast calls, one per rank's block.
//
// send_recv: NCCL has no tags; messages between two ranks match in the order they are
// issued (the tag is only checked, against the host communicator's max_tag()), and the two
// sides' byte counts must agree (NCCL cannot report a mismatch as MPI does: it would hang or
// fail the communicator).
//
// Lifetime: the destructor waits for the operations under way (under the time limit) and
// destroys the NCCL communicator (ncclCommDestroy), or aborts it (ncclCommAbort) when it runs
// during exception unwinding or after a failed NCCL call, so a failed rank does not wait
// forever for its peers.
#pragma once

#if !GRIDNN_HAVE_NCCL
#error "parallel/nccl_communicator.h needs an NCCL build: include it under #if GRIDNN_HAVE_NCCL"
#endif

#include <nccl.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"

#if GRIDNN_HAVE_MPI
#include <mpi.h>
#endif

namespace gridnn::parallel {

// A fresh id for a new NCCL communicator (ncclGetUniqueId): made by one rank, then given to
// every rank of the group before they call make_nccl_communicator.
ncclUniqueId make_nccl_unique_id();

// Rank `rank` of an NCCL communicator of `size` ranks on CUDA device `device`, joined through
// `id` (collective: ncclCommInitRank returns once every rank has joined). `host` carries
// host tensors and barrier(); it may be null for size 1 (a self communicator is used), and
// for size > 1 host tensors are then an error and barrier() runs through NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(const ncclUniqueId& id, int rank, int size, int device,
                                                     std::string name, std::unique_ptr<Communicator> host);

#if GRIDNN_HAVE_MPI
// Over MPI communicator `comm` (taken and freed, as make_mpi_communicator): rank 0 of `comm`
// makes the unique id, MPI_Bcast hands it to the others, and an MPI communicator over
// `comm` with the same name carries host tensors. Collective over `comm`.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name, int device);
#endif

}  // namespace gridnn::parallel
