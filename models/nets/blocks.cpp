// BlockNetwork's lookups.
#include "models/nets/blocks.h"

#include "core/allocator.h"
#include "core/error.h"
#include "models/layers/module.h"

namespace gridnn::nn {

size_t BlockNetwork::block_of(const std::string& tensor_name) const {
  const std::vector<BlockInfo>& all = blocks();
  for (size_t i = 0; i < all.size(); ++i)
    for (const std::string& prefix : all[i].prefixes)
      if (tensor_name.compare(0, prefix.size(), prefix) == 0) return i;
  throw Error("'" + tensor_name + "' belongs to no block of the network");
}

Tensor BlockNetwork::forward_blocks(size_t begin, size_t end, const Tensor& x) {
  Tensor h = x;
  stashed_.resize(block_count());
  for (size_t i = begin; i < end; ++i) {
    const AllocationScope scope("the forward of block ", blocks()[i].name);
    const bool again = recompute_ && !NoBackwardScope::active() && recomputable(i);
    stashed_[i] = again ? h : Tensor();
    h = forward_block(i, h);
    if (again) release_block(i);
  }
  return h;
}

Tensor BlockNetwork::backward_blocks(size_t begin, size_t end, const Tensor& dy) {
  Tensor g = dy;
  stashed_.resize(block_count());
  for (size_t i = end; i-- > begin;) {
    if (stashed_[i].defined()) {  // its forward again, for the state its backward needs
      const AllocationScope scope("the recomputed forward of block ", blocks()[i].name);
      const nn::RecomputeScope recomputing;
      forward_block(i, stashed_[i]);
      stashed_[i] = Tensor();
    }
    g = backward_block(i, std::move(g));
  }
  return g;
}

Shape BlockNetwork::describe_block(size_t i, const Shape& /*input*/, plan::RankStep& /*step*/) const {
  throw Error("block " + blocks().at(i).name + ": this network does not describe its blocks");
}

Shape BlockNetwork::describe_blocks(size_t begin, size_t end, const Shape& input, plan::RankStep& step) const {
  Shape s = input;
  for (size_t i = begin; i < end; ++i) s = describe_block(i, s, step);
  return s;
}

bool BlockNetwork::has_recomputable_blocks() const {
  for (size_t i = 0; i < block_count(); ++i)
    if (recomputable(i)) return true;
  return false;
}

std::vector<std::string> BlockNetwork::block_names() const {
  std::vector<std::string> names;
  for (const BlockInfo& b : blocks()) names.push_back(b.name);
  return names;
}

}  // namespace gridnn::nn
