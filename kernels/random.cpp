#include "kernels/random.h"

#include <cmath>

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {
void draw(const char* op, Tensor& t, Distribution d, float a, float b, const RandomKey& key) {
  expect_defined(op, "t", t);
  expect_floating(op, t);
  GRIDNN_REQUIRE(key.offset >= 0, op, ": offset must be >= 0, got ", key.offset);
  GRIDNN_BACKEND_CALL(t.device(), random, RandomSpec{d, a, b, key}, t);
}
void require_fan(const char* op, int64_t fan) {
  GRIDNN_REQUIRE(fan > 0, op, ": fan must be > 0, got ", fan);
}
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
