// The paired collectives of the distributed layers (mappings.h).
#include "parallel/mappings.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/layout.h"

namespace gridnn::parallel {
namespace {

// The order of dimensions that brings `dim` to the front, and its inverse.
std::vector<int> to_front(int rank, int dim) {
  std::vector<int> p{dim};
  for (int k = 0; k < rank; ++k)
    if (k != dim) p.push_back(k);
  return p;
}
std::vector<int> from_front(int rank, int dim) {
  std::vector<int> p;
  for (int k = 1; k <= dim; ++k) p.push_back(k);
  p.push_back(0);
  for (int k = dim + 1; k < rank; ++k) p.push_back(k);
  return p;
}

// `t` with `dim` first (t itself when it is already first).
Tensor leading(const Tensor& t, int dim) { return dim == 0 ? t : ops::permute(t, to_front(t.rank(), dim)); }
Tensor restored(const Tensor& t, int dim) { return dim == 0 ? t : ops::permute(t, from_front(t.rank(), dim)); }

void check(const char* op, const Tensor& t, const BlockSplit& s, int64_t expected) {
  GRIDNN_REQUIRE(s.comm && s.parts >= s.comm->size() && s.unit >= 1, op, ": ", s.parts, " units split over ",
                 s.comm ? s.comm->size() : 0, " ranks leave a rank without any");
  GRIDNN_REQUIRE(t.defined() && s.dim >= 0 && s.dim < t.rank() && t.size(s.dim) == expected, op, ": expected ",
                 expected, " slices along dimension ", s.dim, ", got ", t.defined() ? t.str() : "undefined");
}

// The tag of redistribute_blocks' messages (halo.cpp's are 0x4a10 and 0x4a11).
constexpr int kRedistributeTag = 0x4a20;

}  // namespace

std::vector<int64_t> BlockSplit::sizes() const {
  std::vector<int64_t> out;
  out.reserve(comm->size());
  for (int i = 0; i < comm->size(); ++i) out.push_back(balanced_range(parts, comm->size(), i).size() * unit);
  return out;
}

Tensor gather_blocks(const Tensor& block, const BlockSplit& split) {
  check("gather_blocks", block, split, split.own().size());
  const Tensor mine = leading(block, split.dim);
  Tensor all = Tensor::empty(mine.shape().with(0, split.whole()), mine.dtype(), mine.device());
  split.comm->all_gatherv(mine, all, split.sizes());
  return restored(all, split.dim);
}

Tensor own_block(const Tensor& whole, const BlockSplit& split) {
  check("own_block", whole, split, split.whole());
  return ops::slice(whole, split.dim, split.own().begin, split.own().size());
}

Tensor reduce_scatter_blocks(const Tensor& whole, const BlockSplit& split) {
  check("reduce_scatter_blocks", whole, split, split.whole());
  const Tensor all = leading(whole, split.dim);
  Tensor mine = Tensor::empty(all.shape().with(0, split.own().size()), all.dtype(), all.device());
  split.comm->reduce_scatterv(all, mine, split.sizes());
  return restored(mine, split.dim);
}

RedistributeRound redistribute_round(const Shape& t, const BlockSplit& from, const BlockSplit& to, int d) {
  const int p = from.comm->size(), r = from.comm->rank();
  RedistributeRound round;
  round.dest = (r + d) % p;
  round.source = (r - d + p) % p;
  const int64_t slice = t.numel() / std::max<int64_t>(1, t[from.dim] * t[to.dim]);  // the other dimensions
  round.sent = from.own().size() * to.block(round.dest).size() * slice;
  round.received = from.block(round.source).size() * to.own().size() * slice;
  return round;
}

Tensor redistribute_blocks(const Tensor& t, const BlockSplit& from, const BlockSplit& to) {
  GRIDNN_REQUIRE(from.comm && from.comm == to.comm && from.dim != to.dim, "redistribute_blocks: both splits must be ",
                 "over the same communicator and along different dimensions");
  check("redistribute_blocks", t, from, from.own().size());
  check("redistribute_blocks", t, to, to.whole());
  Communicator& comm = *from.comm;
  // Rank j's part of this rank's block: the slices of j's block along to.dim (a copy).
  auto part_for = [&](int j) { return ops::slice(t, to.dim, to.block(j).begin, to.block(j).size()); };
  const Range mine = from.own();
  Tensor out =
      Tensor::empty(t.shape().with(to.dim, to.own().size()).with(from.dim, from.whole()), t.dtype(), t.device());
  ops::copy_slices(part_for(comm.rank()), from.dim, 0, out, mine.begin, mine.size());
  for (int d = 1; d < comm.size(); ++d) {
    const RedistributeRound round = redistribute_round(t.shape(), from, to, d);
    const Range theirs = from.block(round.source);
    Tensor incoming = Tensor::empty(out.shape().with(from.dim, theirs.size()), t.dtype(), t.device());
    comm.send_recv(part_for(round.dest), round.dest, incoming, round.source, kRedistributeTag);
    ops::copy_slices(incoming, from.dim, 0, out, theirs.begin, theirs.size());
  }
  return out;
}

}  // namespace gridnn::parallel
