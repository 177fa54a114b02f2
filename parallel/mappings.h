// The communication of the distributed layers, each forward collective paired with the one
// its backward makes (as Megatron-LM's mappings; docs/design.md §4). A layer of models/dist/
// calls a pair's forward in its forward and the same pair's backward in its backward, so
// the pairing is visible where the layer is defined.
//
//   pair                      forward                           backward
//   halo                      HaloExchange::extend: fetch the   HaloExchange::return_gradient:
//   (parallel/halo.h)         planes a window reads from their  send those planes' gradients back,
//                             owners                            added by their owners
//   gather <-> own block      gather_blocks: the balanced       own_block: the whole's gradient is
//                             blocks all-gathered               the same on every rank; keep this
//                                                               rank's block (no communication)
//   gather <-> reduce-scatter gather_blocks                     reduce_scatter_blocks: every rank's
//                                                               gradient of the whole differs; sum
//                                                               them, each rank keeping its block
//   copy <-> all-reduce       nothing: the input is replicated  Communicator::all_reduce of each
//                                                               rank's partial input gradient
//   all-reduce <-> copy       Communicator::all_reduce of       nothing: the output's gradient is
//                             partial results                   replicated
//   all-reduce <-> all-reduce batch-norm statistics             the sums of their gradients
//   all-to-all <-> all-to-all redistribute_blocks: a tensor     the same with the splits swapped
//                             split along one dimension becomes (its own transpose: data only
//                             split along another (depth slabs  moves, so the pair is exact)
//                             -> batch shards)
//
// Blocks may lie along any dimension: the tensors are permuted so that the block dimension
// comes first (the communicators gather along dimension 0) and back (kernels/layout.h, on
// the tensor's own device).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gridnn::parallel {

// A tensor split along dimension `dim` in balanced blocks over the ranks of `comm`: the
// whole has `parts` units of `unit` slices each (depth planes of H·W positions, output rows
// of one element), and rank i holds units balanced_range(parts, comm.size(), i).
struct BlockSplit {
  Communicator* comm = nullptr;
  int dim = 0;
  int64_t parts = 0;
  int64_t unit = 1;

  Range own_units() const { return balanced_range(parts, comm->size(), comm->rank()); }
  // Slices along `dim`: rank i's, this rank's, every rank's, the whole's.
  Range block(int i) const {
    const Range u = balanced_range(parts, comm->size(), i);
    return {u.begin * unit, u.end * unit};
  }
  Range own() const { return block(comm->rank()); }
  std::vector<int64_t> sizes() const;
  int64_t whole() const { return parts * unit; }
};

// The whole tensor on every rank from this rank's block (all_gatherv over split.comm).
Tensor gather_blocks(const Tensor& block, const BlockSplit& split);
// This rank's block of a whole tensor (a copy; no communication).
Tensor own_block(const Tensor& whole, const BlockSplit& split);
// The sum over the ranks of their `whole` tensors, this rank's block of it (reduce_scatterv).
Tensor reduce_scatter_blocks(const Tensor& whole, const BlockSplit& split);
// A tensor split along `from.dim` (this rank's block `t`, whole along to.dim) -> the same
// tensor split along `to.dim` (whole along from.dim): rank i sends rank j the part of its
// block that lies in j's block along to.dim, by send_recv over the common communicator
// (P - 1 rounds, each rank sending one peer and receiving from another in each). Both splits
// are over the same communicator and along different dimensions.
Tensor redistribute_blocks(const Tensor& t, const BlockSplit& from, const BlockSplit& to);
// Round d (1 ... P - 1) of redistribute_blocks on this rank, for a block of shape `t`: the
// peers and the elements sent and received (what the cost model describes).
struct RedistributeRound {
  int dest = 0, source = 0;
  int64_t sent = 0, received = 0;
};
RedistributeRound redistribute_round(const Shape& t, const BlockSplit& from, const BlockSplit& to, int d);

}  // namespace gridnn::parallel
