// Argument checks of kernels/dropout.h and the dispatch to the CPU or CUDA backend.
#include "kernels/dropout.h"

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {
void run(const char* op, const Tensor& in, float p, const DropoutKey& key, Tensor& out) {
  expect_elementwise(op, in, out);
  expect_no_partial_overlap(op, in, out);
  GRIDNN_REQUIRE(p >= 0.0f && p <= 1.0f, op, ": p must be in [0, 1], got ", p);
  GRIDNN_REQUIRE(key.offset >= 0 && key.offset + in.numel() <= (int64_t(1) << 40), op, ": offset ", key.offset,
                 " plus the ", in.numel(), " elements of ", in.str(), " must stay below 2^40");
  GRIDNN_REQUIRE(key.step < (uint64_t(1) << 24), op, ": step ", key.step, " must be below 2^24");
  if (in.numel() == 0) return;
  DropoutSpec s;
  s.p = p;
  s.scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  s.seed = key.seed;
  s.stream = key.stream;
  s.base = (key.step << 40) + uint64_t(key.offset);
  GRIDNN_BACKEND_CALL(in.device(), dropout, s, in, out);
}
}  // namespace

void dropout_forward(const Tensor& x, float p, const DropoutKey& key, Tensor& y) {
  run("dropout_forward", x, p, key, y);
}
void dropout_backward(const Tensor& dy, float p, const DropoutKey& key, Tensor& dx) {
  run("dropout_backward", dy, p, key, dx);
}

}  // namespace gridnn::ops
