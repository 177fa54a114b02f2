// GradientSync: buckets by communicator, packed into a flat tensor, one all-reduce each.
#include "models/train/gradient_sync.h"

#include <algorithm>

#include "core/error.h"

namespace gridnn::train {

GradientSync::GradientSync(dist::ProcessGrid& grid, std::vector<std::pair<std::string, nn::Parameter*>> params,
                           int64_t bucket_bytes) {
  std::reverse(params.begin(), params.end());  // the order backward finishes them
  for (auto& [name, p] : params) {
    GRIDNN_REQUIRE(p->grad.dtype() == DType::f32, "gradient sync: parameter ", name, " has a ",
                   dtype_name(p->grad.dtype()), " gradient; only f32 is supported");
    dist::Communicator* comm = p->reduction == nn::GradientReduction::stage ? &grid.stage_comm() : &grid.col();
    if (comm->size() == 1) continue;
    const int64_t bytes = p->grad.numel() * int64_t(sizeof(float));
    Bucket* open = nullptr;
    for (auto& b : buckets_)
      if (b.comm == comm && b.elements * int64_t(sizeof(float)) + bytes <= bucket_bytes &&
          b.params.front()->grad.device() == p->grad.device())
        open = &b;
    if (!open || open != &buckets_.back()) {  // keep buckets contiguous in backward order
      buckets_.push_back({comm, {}, 0, {}});
      open = &buckets_.back();
    }
    open->params.push_back(p);
    open->elements += p->grad.numel();
  }
}

void GradientSync::reduce() {
  dist::CommLayerScope scope("gradients");
  for (Bucket& b : buckets_) {
    const Device device = b.params.front()->grad.device();
    if (!b.flat.defined()) b.flat = Tensor::empty({b.elements}, DType::f32, device);
    int64_t offset = 0;
    for (nn::Parameter* p : b.params) {
      b.flat.narrow(offset, p->grad.numel()).reshape(p->grad.shape()).copy_from(p->grad);
      offset += p->grad.numel();
    }
    b.comm->all_reduce(b.flat);
    offset = 0;
    for (nn::Parameter* p : b.params) {
      p->grad.copy_from(b.flat.narrow(offset, p->grad.numel()).reshape(p->grad.shape()));
      offset += p->grad.numel();
    }
  }
}

}  // namespace gridnn::train
