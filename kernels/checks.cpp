#include "kernels/checks.h"

namespace gridnn::kernels {

void expect_defined(const char* op, const char* name, const Tensor& t) {
  GRIDNN_REQUIRE(t.defined(), op, ": tensor '", name, "' is undefined; allocate it first");
}

void expect_same_device(const char* op, const Tensor& a, const Tensor& b) {
  GRIDNN_REQUIRE(a.device() == b.device(), op, ": tensors are on different devices (", a.str(), " and ", b.str(),
                 "); move one with .to(device)");
}

void expect_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  GRIDNN_REQUIRE(a.shape() == b.shape(), op, ": shapes differ (", a.str(), " and ", b.str(), ")");
}

void expect_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  GRIDNN_REQUIRE(a.dtype() == b.dtype(), op, ": dtypes differ (", a.str(), " and ", b.str(), "); cast one first");
}

void expect_floating(const char* op, const Tensor& t) {
  GRIDNN_REQUIRE(is_floating(t.dtype()), op, ": needs a floating tensor (f32, f16, bf16), got ", t.str());
}

void expect_elementwise(const char* op, const Tensor& a, const Tensor& b) {
  expect_defined(op, "a", a);
  expect_defined(op, "b", b);
  expect_same_device(op, a, b);
  expect_same_shape(op, a, b);
  expect_same_dtype(op, a, b);
  expect_floating(op, a);
}

void expect_no_partial_overlap(const char* op, const Tensor& in, const Tensor& out) {
  GRIDNN_REQUIRE(!out.overlaps_partially(in), op, ": the output ", out.str(), " partly overlaps an input ", in.str(),
                 " in memory; write to a separate tensor or to the input itself");
}

void expect_disjoint(const char* op, const Tensor& in, const Tensor& out) {
  GRIDNN_REQUIRE(!out.shares_storage_with(in), op, ": the output ", out.str(), " shares memory with an input ",
                 in.str(), "; use a separate output tensor");
}

void throw_no_cuda(const char* op) {
  throw Error(std::string(op) +
              ": tensor is on a CUDA device but gridnn was built without CUDA; rebuild with "
              "-DGRIDNN_CUDA=ON or keep tensors on the cpu");
}

}  // namespace gridnn::kernels
