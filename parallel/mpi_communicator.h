// The MPI backend of Communicator (MPI builds only).
//
// Host tensors go to MPI directly; device tensors are staged through pinned host buffers
// that the communicator owns and reuses (parallel/pinned_staging.h): cudaMemcpyAsync on the
// device's compute stream, then a synchronization of it, before and after the MPI call. This
// is the backend for device tensors when ranks share a GPU or gridnn has no NCCL; otherwise
// parallel/nccl_communicator.h carries them.
//
// Determinism: every reduction (all_reduce, reduce_scatter and their v-variants) is
// computed in a fixed order that does not depend on MPI's algorithms. The tensor is cut into
// one block per rank; an all-to-all brings block i of every rank to rank i, which adds them
// in rank order (0, 1, 2, ...); all_reduce then all-gathers the reduced blocks byte for byte.
// So results are bitwise repeatable on a grid and bitwise identical on every rank (replicated
// weights stay identical), at the traffic of a ring all-reduce (about 2n per rank).
//
// start_all_reduce runs the same two phases without blocking (bitwise the same result), on
// two duplicates of the communicator, one per phase, so that ranks which find phase 1 done
// at different moments still issue every collective in the same order.
//
// On one node (every rank of the communicator on this node) all_reduce goes through a
// shared-memory window instead (parallel/shared_reduce.h): the same rank-order sums, the same
// bits, fewer copies, and no dependence on MPI's message progress. There
// start_all_reduce defers the work: it runs when it or one started after it is waited for,
// after the all-reduces started before it. GRIDNN_SHARED_REDUCE=0 keeps messages on one node
// too.
//
// Waiting (docs/design.md §11): MPICH busy-polls in MPI_Wait, which starves the other ranks when a
// node has more ranks than cores. Every call therefore starts a non-blocking operation and,
// on an oversubscribed node, waits with MPI_Testall and a 20 µs sleep; otherwise with
// MPI_Waitall. Oversubscribed means: the most ranks of any communicator made so far that
// share this node (MPI_Comm_split_type SHARED), times each rank's OpenMP threads, exceed the
// cores this process may run on.
// The environment variable GRIDNN_POLITE_WAIT=1 / 0 forces polite / plain waiting.
// Every wait is also under the time limit of parallel/progress_board.h (comm_timeout()):
// with a limit, plain waiting polls MPI_Testall instead of blocking in MPI_Waitall.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace gridnn::parallel {

// A Communicator over `comm`, which it owns and frees (pass a duplicated or split
// communicator, never MPI_COMM_WORLD itself). Collective over `comm`: every rank of it calls
// this together (it looks up how many of them share the node). Sets MPI_ERRORS_RETURN on
// `comm` so failures throw MpiError.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name);

// Whether MPI communicators wait politely now (see above).
bool mpi_polite_wait();
// Forces polite (1) or plain (0) waiting for this process, or back to detection (-1); for
// tests and benchmarks. Overrides GRIDNN_POLITE_WAIT.
void set_mpi_polite_wait(int mode);

// Whether `comm`'s all-reduces run through shared memory (an MPI communicator of several
// ranks, all on this node, made while mpi_shared_reduce() held). The same on every rank.
bool reduces_through_shared_memory(const Communicator& comm);

// Whether communicators made from now on reduce through shared memory where their ranks
// share a node (see above; GRIDNN_SHARED_REDUCE, on by default).
bool mpi_shared_reduce();
// Forces it on (1) or off (0) for this process, or back to the environment (-1); for tests
// and benchmarks, on every rank alike. Overrides GRIDNN_SHARED_REDUCE.
void set_mpi_shared_reduce(int mode);

}  // namespace gridnn::parallel
