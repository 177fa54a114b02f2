// Random initialization from the Philox generator of core/philox.h.
//
// Element i of the tensor gets the value keyed by (key.seed, key.stream, key.offset + i),
// so a slice of a parameter initialized with offset = index of its first element in the
// full parameter holds exactly the values of the full parameter (grid invariance).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gridnn::ops {

struct RandomKey {
  uint64_t seed = 0;
  uint64_t stream = 0;  // what is drawn: philox_stream_id("layer1.0.conv1.weight"), a sample id...
  int64_t offset = 0;   // global index of this tensor's element 0
};

void uniform_(Tensor& t, float low, float high, const RandomKey& key);  // [low, high)
void normal_(Tensor& t, float mean, float stddev, const RandomKey& key);

// PyTorch's conventions: fan_in = in_channels * kernel volume, gain sqrt(2) for ReLU.
void kaiming_normal_(Tensor& t, int64_t fan_in, const RandomKey& key, float gain = 1.41421356f);
void kaiming_uniform_(Tensor& t, int64_t fan_in, const RandomKey& key, float gain = 1.41421356f);
void xavier_uniform_(Tensor& t, int64_t fan_in, int64_t fan_out, const RandomKey& key,
                     float gain = 1.0f);

}  // namespace gridnn::ops

namespace gridnn::kernels {
enum class Distribution { uniform, normal };
// uniform: a + (b - a) * u; normal: a + b * z.
struct RandomSpec {
  Distribution distribution;
  float a, b;
  ops::RandomKey key;
};
}  // namespace gridnn::kernels

namespace gridnn::kernels::cpu {
void random(const RandomSpec& spec, Tensor& t);
}
namespace gridnn::kernels::cuda {
void random(const RandomSpec& spec, Tensor& t);
}
