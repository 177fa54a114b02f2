#include "test/support/tensor_compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/elementwise.h"

namespace gridnn::test {

namespace {
template <class T>
double as_double(T v) {
  if constexpr (std::is_integral_v<T>)
    return double(v);
  else
    return double(to_float(v));
}
}  // namespace

Tensor from_doubles(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape);
}

std::vector<double> to_doubles(const Tensor& t) {
  Tensor host = t.to_host();
  std::vector<double> out(size_t(host.numel()));
  GRIDNN_DISPATCH_ALL(host.dtype(), "to_doubles", [&] {
    const scalar_t* p = static_cast<const scalar_t*>(host.raw());
    for (size_t i = 0; i < out.size(); ++i) out[i] = as_double(p[i]);
  });
  return out;
}

namespace {

std::string multi_index(const Shape& s, int64_t flat) {
  std::vector<int64_t> idx(size_t(s.rank()));
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[size_t(d)] = flat % s[d];
    flat /= s[d];
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

::testing::AssertionResult same_layout(const Tensor& a, const Tensor& e) {
  if (!a.defined() || !e.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (a.shape() != e.shape())
    return ::testing::AssertionFailure() << "shape " << a.shape().str() << " != expected " << e.shape().str();
  if (a.dtype() != e.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(a.dtype()) << " != expected "
                                         << dtype_name(e.dtype());
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  if (auto r = same_layout(actual, expected); !r) return r;
  std::vector<double> a = to_doubles(actual), e = to_doubles(expected);
  int64_t failures = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double err = std::fabs(a[i] - e[i]);
    bool ok;
    if (std::isnan(e[i]))
      ok = std::isnan(a[i]);
    else if (std::isinf(e[i]))
      ok = a[i] == e[i];
    else
      ok = err <= tol.atol + tol.rtol * std::fabs(e[i]);
    if (ok) continue;
    ++failures;
    double excess = std::isnan(err) ? INFINITY : err - tol.atol - tol.rtol * std::fabs(e[i]);
    if (worst < 0 || excess > worst_excess) {
      worst = int64_t(i);
      worst_excess = excess;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  size_t w = size_t(worst);
  std::ostringstream os;
  os.precision(9);
  os << failures << " of " << a.size() << " elements of " << actual.str() << " differ beyond atol " << tol.atol
     << " + rtol " << tol.rtol << " * |expected|; worst at flat " << worst << " " << multi_index(actual.shape(), worst)
     << ": actual " << a[w] << ", expected " << e[w] << ", |error| " << std::fabs(a[w] - e[w]);
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult tensors_equal(const Tensor& actual, const Tensor& expected) {
  if (auto r = same_layout(actual, expected); !r) return r;
  Tensor a = actual.to_host();
  Tensor e = expected.to_host();
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pe = static_cast<const unsigned char*>(e.raw());
  size_t es = dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + size_t(i) * es, pe + size_t(i) * es, es) != 0) {
      std::vector<double> da = to_doubles(a), de = to_doubles(e);
      return ::testing::AssertionFailure()
             << "first differing element at flat " << i << " " << multi_index(a.shape(), i) << ": actual "
             << da[size_t(i)] << ", expected " << de[size_t(i)];
    }
  }
  return ::testing::AssertionSuccess();
}

double max_relative_error(const Tensor& actual, const Tensor& expected) {
  std::vector<double> a = to_doubles(actual), e = to_doubles(expected);
  GRIDNN_REQUIRE(a.size() == e.size(), "max_relative_error: sizes differ");
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_err = std::max(max_err, std::fabs(a[i] - e[i]));
    max_ref = std::max(max_ref, std::fabs(e[i]));
  }
  if (max_err == 0) return 0;
  return max_ref == 0 ? INFINITY : max_err / max_ref;
}

}  // namespace gridnn::test
