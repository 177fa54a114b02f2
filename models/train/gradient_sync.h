// Gradient synchronization on a process grid (DESIGN §4): after backward, every parameter's
// gradient is summed over the ranks that share it — the whole stage for weights replicated
// there (convolutions, batch norm, attention), the col communicator for the others
// (Parameter::reduction) — so that every rank's optimizer then takes the same step.
//
// Gradients travel in buckets of about `bucket_bytes`, packed into one flat tensor per
// bucket (parameters in reverse registration order: the order backward finishes them), one
// all-reduce per bucket. Counted in the comm log under the layer "gradients".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/module.h"
#include "parallel/process_grid.h"

namespace gridnn::train {

class GradientSync {
 public:
  GradientSync(dist::ProcessGrid& grid, std::vector<std::pair<std::string, nn::Parameter*>> params,
               int64_t bucket_bytes = int64_t(4) << 20);
  // Sums every gradient over its communicator (nothing on a 1x1 grid).
  void reduce();
  int64_t buckets() const { return int64_t(buckets_.size()); }

 private:
  struct Bucket {
    dist::Communicator* comm;
    std::vector<nn::Parameter*> params;
    int64_t elements = 0;
    Tensor flat;  // allocated on first use, on the parameters' device
  };
  std::vector<Bucket> buckets_;
};

}  // namespace gridnn::train
