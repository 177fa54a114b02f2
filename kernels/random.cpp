#include "kernels/random.h"

#include <algorithm>
#include <cmath>

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

// Row splits: the local tensor is one run of global indices starting at key.offset.
IndexMap row_map(const char* op, const Tensor& t, const RandomKey& key) {
  GRIDNN_REQUIRE(key.offset >= 0, op, ": offset must be >= 0, got ", key.offset);
  IndexMap m{};
  m.rank = 1;
  m.dims[0] = std::max<int64_t>(t.numel(), 1);
  m.strides[0] = 1;
  m.base = key.offset;
  return m;
}

// Box splits: the local tensor is the box at key.origin inside key.global.
IndexMap box_map(const char* op, const Tensor& t, const RandomKey& key) {
  const Shape& g = key.global;
  GRIDNN_REQUIRE(g.rank() == t.rank() && int(key.origin.size()) == g.rank(), op, ": the key's global shape ", g.str(),
                 " and origin (", key.origin.size(), " values) must have the rank of ", t.str());
  IndexMap m{};
  m.rank = g.rank();
  m.base = 0;
  for (int d = 0; d < g.rank(); ++d) {
    GRIDNN_REQUIRE(key.origin[size_t(d)] >= 0 && key.origin[size_t(d)] + t.size(d) <= g[d], op, ": ", t.str(),
                   " at origin index ", key.origin[size_t(d)], " does not fit in dimension ", d,
                   " of the global shape ", g.str());
    m.dims[d] = std::max<int64_t>(t.size(d), 1);
    m.strides[d] = g.stride(d);
    m.base += key.origin[size_t(d)] * g.stride(d);
  }
  return m;
}

void draw(const char* op, Tensor& t, Distribution d, float a, float b, const RandomKey& key) {
  expect_defined(op, "t", t);
  expect_floating(op, t);
  IndexMap map = key.global.rank() > 0 ? box_map(op, t, key) : row_map(op, t, key);
  GRIDNN_BACKEND_CALL(t.device(), random, RandomSpec{d, a, b, key.seed, key.stream, map}, t);
}
void require_fan(const char* op, int64_t fan) { GRIDNN_REQUIRE(fan > 0, op, ": fan must be > 0, got ", fan); }
}  // namespace

void uniform_(Tensor& t, float low, float high, const RandomKey& key) {
  GRIDNN_REQUIRE(low <= high, "uniform_: low (", low, ") must not exceed high (", high, ")");
  draw("uniform_", t, Distribution::uniform, low, high, key);
}

void normal_(Tensor& t, float mean, float stddev, const RandomKey& key) {
  GRIDNN_REQUIRE(stddev >= 0, "normal_: stddev must be >= 0, got ", stddev);
  draw("normal_", t, Distribution::normal, mean, stddev, key);
}

void kaiming_normal_(Tensor& t, int64_t fan_in, const RandomKey& key, float gain) {
  require_fan("kaiming_normal_", fan_in);
  normal_(t, 0.0f, gain / std::sqrt(float(fan_in)), key);
}

void kaiming_uniform_(Tensor& t, int64_t fan_in, const RandomKey& key, float gain) {
  require_fan("kaiming_uniform_", fan_in);
  float bound = gain * std::sqrt(3.0f / float(fan_in));
  uniform_(t, -bound, bound, key);
}

void xavier_uniform_(Tensor& t, int64_t fan_in, int64_t fan_out, const RandomKey& key, float gain) {
  require_fan("xavier_uniform_", fan_in);
  require_fan("xavier_uniform_", fan_out);
  float bound = gain * std::sqrt(6.0f / float(fan_in + fan_out));
  uniform_(t, -bound, bound, key);
}

}  // namespace gridnn::ops
