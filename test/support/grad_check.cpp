#include "test/support/grad_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "test/support/tensor_compare.h"

namespace gridnn::test {

::testing::AssertionResult check_gradient(const std::function<double()>& loss, Tensor& x, const Tensor& analytic_grad,
                                          const GradCheckOptions& o) {
  if (!x.device().is_cpu() || x.dtype() != DType::f32)
    return ::testing::AssertionFailure() << "check_gradient needs a CPU f32 input, got " << x.str();
  if (analytic_grad.shape() != x.shape())
    return ::testing::AssertionFailure() << "gradient " << analytic_grad.shape().str() << " does not match input "
                                         << x.shape().str();
  std::vector<double> grad = to_doubles(analytic_grad);
  float* p = x.data<float>();
  const int64_t n = x.numel();
  const int64_t step = n > o.max_points ? (n + o.max_points - 1) / o.max_points : 1;
  int64_t checked = 0, failures = 0, worst = -1, kinks = 0;
  double worst_excess = 0, worst_numeric = 0;
  for (int64_t i = 0; i < n; i += step) {
    if (o.skip && o.skip(i)) continue;
    const float saved = p[i];
    p[i] = float(double(saved) + o.eps);
    const double plus = loss();
    p[i] = float(double(saved) - o.eps);
    const double minus = loss();
    p[i] = saved;
    // Divide by the perturbation actually applied after rounding to float.
    const double h = double(float(double(saved) + o.eps)) - double(float(double(saved) - o.eps));
    const double numeric = (plus - minus) / h;
    if (o.skip_kinks) {
      const double center = loss();
      const double right = 2 * (plus - center) / h, left = 2 * (center - minus) / h;
      if (std::fabs(right - left) > o.atol + o.rtol * std::max(std::fabs(right), std::fabs(left))) {
        ++kinks;
        continue;
      }
    }
    const double err = std::fabs(numeric - grad[size_t(i)]);
    const double allowed = o.atol + o.rtol * std::fabs(numeric);
    ++checked;
    if (!(err <= allowed)) {
      ++failures;
      if (worst < 0 || err - allowed > worst_excess) {
        worst = i;
        worst_excess = err - allowed;
        worst_numeric = numeric;
      }
    }
  }
  if (checked == 0) return ::testing::AssertionFailure() << "check_gradient checked no element";
  if (kinks > 2 && kinks * 4 > checked + kinks)
    return ::testing::AssertionFailure() << kinks << " of " << checked + kinks
                                         << " elements sit at kinks; use a smaller eps or another point";
  if (failures == 0) return ::testing::AssertionSuccess() << checked << " elements checked";
  std::ostringstream os;
  os.precision(9);
  os << failures << " of " << checked << " checked elements of " << x.str()
     << " disagree with central differences; worst at flat " << worst << ": numeric " << worst_numeric << ", analytic "
     << grad[size_t(worst)];
  return ::testing::AssertionFailure() << os.str();
}

double weighted_sum(const Tensor& y, const Tensor& w) {
  std::vector<double> a = to_doubles(y), b = to_doubles(w);
  GRIDNN_REQUIRE(a.size() == b.size(), "weighted_sum: ", y.str(), " and ", w.str(), " differ in size");
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace gridnn::test
