#include "test/ops/harness.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <sstream>

#include "core/device.h"
#include "core/philox.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {

std::string OpCase::name() const {
  std::string s = op + "/" + params;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

Tensor tensor_of(const Doubles& v, const Shape& shape) {
  GRIDNN_REQUIRE(int64_t(v.size()) == shape.numel(), "tensor_of: ", v.size(), " values for shape ",
                 shape.str());
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = float(v[i]);
  return t;
}

std::string shape_name(const Shape& s) {
  std::string out;
  for (int d = 0; d < s.rank(); ++d) out += (d ? "x" : "") + std::to_string(s[d]);
  return out.empty() ? "scalar" : out;
}

Tolerance stored_tolerance(DType dtype, Tolerance f32) {
  if (dtype == DType::f16) return {std::max(f32.atol, 1e-3), std::max(f32.rtol, 1e-3)};
  if (dtype == DType::bf16) return {std::max(f32.atol, 1e-2), std::max(f32.rtol, 8e-3)};
  return f32;
}

Tensor case_input(const std::string& key, int index, const Shape& shape, float lo, float hi, DType dtype) {
  return random_tensor(shape, philox_stream_id(key.c_str()) + uint64_t(index), lo, hi, dtype);
}

namespace {

// |actual - expected| <= atol + rtol * |expected| everywhere (NaN only where NaN is expected).
::testing::AssertionResult close_to(const Tensor& actual, const Doubles& expected, Tolerance tol,
                                    const std::string& what) {
  const Doubles a = to_doubles(actual);
  if (a.size() != expected.size())
    return ::testing::AssertionFailure() << what << ": " << a.size() << " values, the reference has "
                                         << expected.size();
  int64_t failures = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = expected[i];
    bool ok;
    if (std::isnan(e))
      ok = std::isnan(a[i]);
    else if (std::isinf(e))
      ok = a[i] == e;
    else
      ok = std::fabs(a[i] - e) <= tol.atol + tol.rtol * std::fabs(e);
    if (ok) continue;
    ++failures;
    const double excess = std::isfinite(a[i]) ? std::fabs(a[i] - e) : INFINITY;
    if (worst < 0 || excess > worst_excess) worst = int64_t(i), worst_excess = excess;
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(9);
  os << what << " " << actual.str() << ": " << failures << " of " << a.size()
     << " elements differ from the double reference (atol " << tol.atol << ", rtol " << tol.rtol
     << "); worst at flat index " << worst << ": " << a[size_t(worst)] << " vs " << expected[size_t(worst)];
  return ::testing::AssertionFailure() << os.str();
}

Tensors on_device(const Tensors& ts, const Device& device) {
  Tensors out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.to(device) : t);
  return out;
}

// dL/d(output 0): the same random weights for every mode and device.
Tensor loss_weights(const OpCase& c, const Tensor& y) {
  return case_input(c.name() + "/dy", 0, y.shape(), -1.0f, 1.0f, y.dtype());
}

::testing::AssertionResult same_outputs(const Tensors& device, const Tensors& cpu, const OpCase& c,
                                        const char* what) {
  if (device.size() != cpu.size())
    return ::testing::AssertionFailure() << what << ": " << device.size() << " tensors on the device, "
                                         << cpu.size() << " on the CPU";
  for (size_t k = 0; k < cpu.size(); ++k) {
    auto r = c.bitwise ? tensors_equal(device[k].to_host(), cpu[k])
                       : tensors_close(device[k].to_host(), cpu[k], c.backend_tol);
    if (!r) return ::testing::AssertionFailure() << what << " " << k << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult check_reference(const OpCase& c) {
  if (!c.reference) return ::testing::AssertionFailure() << c.name() << " has no reference";
  Tensors in = c.make_inputs();
  const Tensors out = c.run(in);
  const std::vector<Doubles> ref = c.reference(in);
  if (ref.size() != out.size())
    return ::testing::AssertionFailure() << out.size() << " outputs, " << ref.size() << " references";
  for (size_t k = 0; k < out.size(); ++k) {
    auto r = close_to(out[k], ref[k], c.ref_tol, "output " + std::to_string(k));
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult check_gradients(const OpCase& c) {
  if (!c.backward) return ::testing::AssertionFailure() << c.name() << " has no backward";
  Tensors in = c.make_inputs();
  const Tensor w = loss_weights(c, c.run(in)[0]);
  const Tensors grads = c.backward(in, w);
  if (grads.size() != c.grad_inputs.size())
    return ::testing::AssertionFailure() << "backward returned " << grads.size() << " gradients for "
                                         << c.grad_inputs.size() << " inputs";
  auto loss = [&] { return weighted_sum(c.run(in)[0], w); };
  for (size_t k = 0; k < grads.size(); ++k) {
    Tensor& x = in[size_t(c.grad_inputs[k])];
    auto r = check_gradient(loss, x, grads[k], c.grad);
    if (!r) return ::testing::AssertionFailure() << "input " << c.grad_inputs[k] << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult check_backend(const OpCase& c, const Device& device) {
  const Tensors cpu_in = c.make_inputs(), dev_in = on_device(cpu_in, device);
  const Tensors cpu_out = c.run(cpu_in), dev_out = c.run(dev_in);
  // Deterministic by default (docs/design.md §3): a second run on the device repeats the first.
  const Tensors again = c.run(dev_in);
  for (size_t k = 0; k < again.size(); ++k)
    if (auto same = tensors_equal(again[k].to_host(), dev_out[k].to_host()); !same)
      return ::testing::AssertionFailure() << "output " << k << " differs between two runs on " << device.str()
                                           << ": " << same.message();
  auto r = same_outputs(dev_out, cpu_out, c, "output");
  if (!r || !c.backward) return r;
  const Tensor dy = loss_weights(c, cpu_out[0]);
  return same_outputs(c.backward(dev_in, dy.to(device)), c.backward(cpu_in, dy), c, "gradient");
}

Timing time_case(const OpCase& c, const Device& device, double min_seconds, int64_t min_runs) {
  const Tensors in = on_device(c.make_inputs(), device);
  Timing t;
  for (const Tensor& x : in) t.bytes_per_run += double(x.defined() ? x.nbytes() : 0);
  for (const Tensor& y : c.run(in)) t.bytes_per_run += double(y.nbytes());  // warm-up
  synchronize(device);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double elapsed = 0;
  while (t.runs < min_runs || elapsed < min_seconds) {
    c.run(in);
    synchronize(device);
    ++t.runs;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  }
  t.seconds_per_run = elapsed / double(t.runs);
  return t;
}

}  // namespace gridnn::test
