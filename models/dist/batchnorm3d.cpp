// nn::SyncBatchNorm3d: the two BatchNorm3d hooks, all-reduced over the stage.
#include "models/dist/batchnorm3d.h"

#include <vector>

namespace gridnn::nn {

SyncBatchNorm3d::SyncBatchNorm3d(dist::Communicator& stage, int64_t num_features, double eps,
                                 double momentum, Device device)
    : BatchNorm3d(num_features, eps, momentum, device), stage_(stage) {}

void SyncBatchNorm3d::reduce_sums(Tensor& sums) {
  dist::CommLayerScope scope(comm_label_);
  stage_.all_reduce(sums);
}

int64_t SyncBatchNorm3d::reduce_count(int64_t local_count) {
  dist::CommLayerScope scope(comm_label_);
  Tensor count =
      Tensor::from_vector(std::vector<int64_t>{local_count}, {1}).to(running_mean().device());
  stage_.all_reduce(count);
  return count.to_vector<int64_t>()[0];
}

}  // namespace gridnn::nn
