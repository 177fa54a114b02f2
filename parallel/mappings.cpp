// The paired collectives of the distributed layers (mappings.h).
#include "parallel/mappings.h"

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

}  // namespace gridnn::parallel
