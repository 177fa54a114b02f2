// Random initialization from the Philox generator of core/philox.h.
//
// Every element gets the value keyed by (key.seed, key.stream, its flat index in the full,
// unsplit tensor), so a rank that holds part of a tensor draws exactly the values the
// single-process run draws for those elements (grid invariance, docs/design.md §2). The part is
// described by the key:
//   - rows [r0, r1) of dimension 0 (a batch shard, a row block of a weight):
//     offset = r0 * (elements per row);
//   - any box (a depth slab of [N, C, D, H, W], a column block): global = the full shape,
//     origin = the box's first index in every dimension (offset is then ignored).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace gridnn::ops {

struct RandomKey {
  RandomKey() = default;
  RandomKey(uint64_t seed_, uint64_t stream_, int64_t offset_ = 0) : seed(seed_), stream(stream_), offset(offset_) {}
  // The key of the tensor called `name` ("layer1.0.conv1.weight"): stream = its FNV hash.
  static RandomKey named(uint64_t seed, const std::string& name, int64_t offset = 0) {
    return RandomKey(seed, philox_stream_id(name.c_str()), offset);
  }
  // The key of the box at `origin` inside a tensor of shape `global`.
  static RandomKey box(uint64_t seed, uint64_t stream, const Shape& global, std::vector<int64_t> origin) {
    RandomKey k(seed, stream);
    k.global = global;
    k.origin = std::move(origin);
    return k;
  }

  uint64_t seed = 0;
  uint64_t stream = 0;          // what is drawn: philox_stream_id("layer1.0.conv1.weight"), a sample id...
  int64_t offset = 0;           // global flat index of this tensor's element 0 (row splits)
  Shape global;                 // rank 0: unused; else the full tensor's shape (box splits)
  std::vector<int64_t> origin;  // with `global`: this tensor's first index in each dimension
};

void uniform_(Tensor& t, float low, float high, const RandomKey& key);  // [low, high)
void normal_(Tensor& t, float mean, float stddev, const RandomKey& key);

// PyTorch's conventions: fan_in = in_channels * kernel volume, gain sqrt(2) for ReLU.
void kaiming_normal_(Tensor& t, int64_t fan_in, const RandomKey& key, float gain = 1.41421356f);
void kaiming_uniform_(Tensor& t, int64_t fan_in, const RandomKey& key, float gain = 1.41421356f);
void xavier_uniform_(Tensor& t, int64_t fan_in, int64_t fan_out, const RandomKey& key, float gain = 1.0f);

}  // namespace gridnn::ops

namespace gridnn::kernels {
enum class Distribution { uniform, normal };

// Maps a local flat index to the global flat index the value is keyed by:
// global = base + sum over d of (local index in dimension d) * strides[d].
struct IndexMap {
  int rank;
  int64_t dims[Shape::kMaxRank];     // local shape
  int64_t strides[Shape::kMaxRank];  // strides of the global shape
  int64_t base;                      // global flat index of local element 0
};

// uniform: a + (b - a) * u; normal: a + b * z.
struct RandomSpec {
  Distribution distribution;
  float a, b;
  uint64_t seed, stream;
  IndexMap map;
};
}  // namespace gridnn::kernels

namespace gridnn::kernels::cpu {
void random(const RandomSpec& spec, Tensor& t);
}
namespace gridnn::kernels::cuda {
void random(const RandomSpec& spec, Tensor& t);
}
