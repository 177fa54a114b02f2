// GatherDepth: all-gather of depth slabs, and its backward.
#include "models/dist/gather_depth.h"

#include <cstring>
#include <vector>

#include "parallel/halo.h"

namespace gridnn::nn {

namespace {
// Copies [A, Bm, P] (A outer, Bm middle, P contiguous planes of `plane` bytes) into
// [Bm, A, P]: the permutation both layouts need, with (A, Bm) = (N*C, D) or (D, N*C).
void swap_outer(const char* src, char* dst, int64_t a, int64_t b, size_t plane) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) std::memcpy(dst + size_t(j * a + i) * plane, src + size_t(i * b + j) * plane, plane);
}
}  // namespace

Tensor depth_major(const Tensor& x) {
  const Tensor h = x.to_host();
  const Shape s = h.shape();
  Tensor out = Tensor::empty({s[2], s[0], s[1], s[3], s[4]}, h.dtype());
  swap_outer(static_cast<const char*>(h.raw()), static_cast<char*>(out.raw()), s[0] * s[1], s[2],
             size_t(s[3] * s[4]) * dtype_size(h.dtype()));
  return out;
}

Tensor depth_minor(const Tensor& x) {
  const Tensor h = x.to_host();
  const Shape s = h.shape();
  Tensor out = Tensor::empty({s[1], s[2], s[0], s[3], s[4]}, h.dtype());
  swap_outer(static_cast<const char*>(h.raw()), static_cast<char*>(out.raw()), s[0], s[1] * s[2],
             size_t(s[3] * s[4]) * dtype_size(h.dtype()));
  return out;
}

GatherDepth::GatherDepth(parallel::Communicator& row, int64_t global_depth)
    : row_(row), depth_(global_depth), own_(parallel::balanced_range(global_depth, row.size(), row.rank())) {}

Tensor GatherDepth::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 5 && x.size(2) == own_.size(), "GatherDepth",
                "expects this rank's " + std::to_string(own_.size()) + " of " + std::to_string(depth_) +
                    " depth planes [B, C, d, H, W], got " + (x.defined() ? x.str() : std::string("(undefined)")));
  parallel::CommLayerScope scope(label_);
  std::vector<int64_t> planes;
  for (int r = 0; r < row_.size(); ++r) planes.push_back(parallel::balanced_range(depth_, row_.size(), r).size());
  const Tensor mine = depth_major(x);
  Tensor all = Tensor::empty(mine.shape().with(0, depth_), mine.dtype());
  row_.all_gatherv(mine, all, planes);
  return depth_minor(all).to(x.device());
}

Tensor GatherDepth::backward(const Tensor& dy) {
  require_layer(dy.defined() && dy.rank() == 5 && dy.size(2) == depth_, "GatherDepth",
                "dy must hold all " + std::to_string(depth_) + " depth planes, got " +
                    (dy.defined() ? dy.str() : std::string("(undefined)")));
  return parallel::slice_planes(dy.to_host(), own_).to(dy.device());
}

Handover::Handover(parallel::Communicator& row, int64_t global_depth, std::unique_ptr<Module> layer)
    : gather_(row, global_depth) {
  layer_ = &register_module("", std::move(layer));
}

Tensor Handover::forward(const Tensor& x) { return layer_->forward(gather_.forward(x)); }

Tensor Handover::backward(const Tensor& dy) {
  const Tensor d = layer_->backward(dy);
  return d.defined() ? gather_.backward(d) : d;
}

}  // namespace gridnn::nn
