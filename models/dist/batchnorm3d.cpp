// nn::SyncBatchNorm3d: the BatchNorm3d hooks, all-reduced over the stage.
#include "models/dist/batchnorm3d.h"

#include <vector>

#include "core/error.h"

namespace gridnn::nn {

std::array<float, 3> count_digits(int64_t count) {
  constexpr int64_t B = kCountDigitBase;
  GRIDNN_REQUIRE(count >= 0 && count < B * B * B, "SyncBatchNorm3d: ", count,
                 " values per channel on one rank; fewer than 2^36 are supported");
  return {float(count % B), float(count / B % B), float(count / (B * B))};
}

int64_t count_from_digits(const float* d) {
  constexpr int64_t B = kCountDigitBase;
  return int64_t(d[0]) + B * int64_t(d[1]) + B * B * int64_t(d[2]);
}

SyncBatchNorm3d::SyncBatchNorm3d(parallel::Communicator& stage, int64_t num_features, double eps,
                                 double momentum, Device device)
    : BatchNorm3d(num_features, eps, momentum, device), stage_(stage) {
  GRIDNN_REQUIRE(stage.size() <= kMaxCountRanks, "SyncBatchNorm3d: a stage of ", stage.size(),
                 " ranks; at most ", kMaxCountRanks, " are supported");
}

int64_t SyncBatchNorm3d::reduce_mean_sums(Tensor& sums, int64_t local_count) {
  parallel::CommLayerScope scope(comm_label_);
  const int64_t C = sums.size(1);
  const std::array<float, 3> digits = count_digits(local_count);
  Tensor message = Tensor::empty({C + 3}, DType::f32, sums.device());
  Tensor mean_sums = sums.narrow(0, 1).reshape({C});  // sum(x); row 1 is not used yet
  message.narrow(0, C).copy_from(mean_sums);
  message.narrow(C, 3).copy_from(Tensor::from_vector(std::vector<float>(digits.begin(), digits.end()), {3}));
  stage_.all_reduce(message);
  mean_sums.copy_from(message.narrow(0, C));
  const std::vector<float> total = message.narrow(C, 3).to_vector<float>();
  return count_from_digits(total.data());
}

void SyncBatchNorm3d::reduce_sums(Tensor& sums) {
  parallel::CommLayerScope scope(comm_label_);
  stage_.all_reduce(sums);
}

}  // namespace gridnn::nn
