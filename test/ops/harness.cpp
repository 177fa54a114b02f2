#include "test/ops/harness.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "core/device.h"
#include "core/philox.h"
#include "test/ops/guarded_memory.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {

std::string OpCase::name() const {
  std::string s = op + "/" + params;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

Tensor tensor_of(const Doubles& v, const Shape& shape) {
  GRIDNN_REQUIRE(int64_t(v.size()) == shape.numel(), "tensor_of: ", v.size(), " values for shape ", shape.str());
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

::testing::AssertionResult same_outputs(const Tensors& device, const Tensors& cpu, const OpCase& c, const char* what) {
  if (device.size() != cpu.size())
    return ::testing::AssertionFailure() << what << ": " << device.size() << " tensors on the device, " << cpu.size()
                                         << " on the CPU";
  for (size_t k = 0; k < cpu.size(); ++k) {
    auto r = c.bitwise ? tensors_equal(device[k].to_host(), cpu[k])
                       : tensors_close(device[k].to_host(), cpu[k], c.backend_tol);
    if (!r) return ::testing::AssertionFailure() << what << " " << k << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// ---- the checks of every run: inputs unchanged, nothing written outside -----------------

using Named = std::vector<std::pair<std::string, Tensor>>;

// Host copies of the inputs' bytes, taken before a run.
Tensors host_copies(const Tensors& in) {
  Tensors out;
  for (const Tensor& t : in) out.push_back(t.defined() ? t.to(Device::cpu()) : t);
  return out;
}

// Each input holds the bytes it held before the run (device inputs read back to the host).
::testing::AssertionResult unchanged(const Tensors& in, const Tensors& before, const std::string& first_name,
                                     size_t named_from) {
  for (size_t k = 0; k < in.size(); ++k) {
    if (!in[k].defined()) continue;
    const Tensor now = in[k].to_host();
    const auto* a = static_cast<const unsigned char*>(now.raw());
    const auto* b = static_cast<const unsigned char*>(before[k].raw());
    const size_t size = dtype_size(in[k].dtype());
    int64_t changed = 0, first = -1;
    for (int64_t i = 0; i < in[k].numel(); ++i)
      if (std::memcmp(a + size_t(i) * size, b + size_t(i) * size, size) != 0 && changed++ == 0) first = i;
    if (changed)
      return ::testing::AssertionFailure()
             << (k < named_from ? "input " + std::to_string(k) : first_name) << " (" << in[k].str()
             << ") changed: " << changed << " of " << in[k].numel() << " elements, the first at flat index " << first;
  }
  return ::testing::AssertionSuccess();
}

// Calls `f` (a run or a backward of the case on `in`) and stores its outputs in `*out`;
// fails, saying `what` ran, when it changed an input or wrote outside any block of memory.
// in[named_from] and later are named `extra` (the backward's dy).
template <class F>
::testing::AssertionResult checked(GuardedMemory& guard, const std::string& what, const Tensors& in, F&& f,
                                   Tensors* out, size_t named_from = SIZE_MAX, const std::string& extra = "") {
  const Tensors before = host_copies(in);
  *out = f();
  Named named;
  for (size_t k = 0; k < in.size(); ++k)
    named.emplace_back(k < named_from ? "input " + std::to_string(k) : extra, in[k]);
  for (size_t k = 0; k < out->size(); ++k) named.emplace_back("output " + std::to_string(k), (*out)[k]);
  if (auto r = guard.check(named); !r) return ::testing::AssertionFailure() << what << ": " << r.message();
  if (auto r = unchanged(in, before, extra, named_from); !r)
    return ::testing::AssertionFailure() << what << ": " << r.message();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult checked_run(GuardedMemory& guard, const std::string& what, const OpCase& c,
                                       const Tensors& in, Tensors* out) {
  return checked(
      guard, what, in, [&] { return c.run(in); }, out);
}

// The backward of `c` on `in` given dy; dy must stay unchanged too.
::testing::AssertionResult checked_backward(GuardedMemory& guard, const std::string& what, const OpCase& c,
                                            const Tensors& in, const Tensor& dy, Tensors* grads) {
  Tensors with_dy = in;
  with_dy.push_back(dy);
  return checked(
      guard, what, with_dy, [&] { return c.backward(in, dy); }, grads, in.size(), "dy");
}

}  // namespace

::testing::AssertionResult check_reference(const OpCase& c) {
  if (!c.reference) return ::testing::AssertionFailure() << c.name() << " has no reference";
  GuardedMemory guard({Device::cpu()});
  const Tensors in = c.make_inputs();
  Tensors out;
  if (auto r = checked_run(guard, "run", c, in, &out); !r) return r;
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
  GuardedMemory guard({Device::cpu()});
  Tensors in = c.make_inputs();
  Tensors out, grads;
  if (auto r = checked_run(guard, "run", c, in, &out); !r) return r;
  const Tensor w = loss_weights(c, out[0]);
  if (auto r = checked_backward(guard, "backward", c, in, w, &grads); !r) return r;
  if (grads.size() != c.grad_inputs.size())
    return ::testing::AssertionFailure() << "backward returned " << grads.size() << " gradients for "
                                         << c.grad_inputs.size() << " inputs";
  // Every run of the central differences is checked too; the first problem is reported.
  ::testing::AssertionResult problem = ::testing::AssertionSuccess();
  auto loss = [&] {
    Tensors y;
    auto r = checked_run(guard, "run at a perturbed input", c, in, &y);
    if (!r && problem) problem = r;
    return weighted_sum(y[0], w);
  };
  for (size_t k = 0; k < grads.size(); ++k) {
    Tensor& x = in[size_t(c.grad_inputs[k])];
    auto r = check_gradient(loss, x, grads[k], c.grad);
    if (!problem) return problem;
    if (!r) return ::testing::AssertionFailure() << "input " << c.grad_inputs[k] << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult check_backend(const OpCase& c, const Device& device) {
  GuardedMemory guard({Device::cpu(), device});
  const Tensors cpu_in = c.make_inputs(), dev_in = on_device(cpu_in, device);
  const std::string on = " on " + device.str();
  Tensors cpu_out, dev_out, again;
  if (auto r = checked_run(guard, "run on cpu", c, cpu_in, &cpu_out); !r) return r;
  if (auto r = checked_run(guard, "run" + on, c, dev_in, &dev_out); !r) return r;
  // Deterministic by default (docs/design.md §3): a second run on the device repeats the first.
  if (auto r = checked_run(guard, "second run" + on, c, dev_in, &again); !r) return r;
  for (size_t k = 0; k < again.size(); ++k)
    if (auto same = tensors_equal(again[k].to_host(), dev_out[k].to_host()); !same)
      return ::testing::AssertionFailure()
             << "output " << k << " differs between two runs" << on << ": " << same.message();
  auto r = same_outputs(dev_out, cpu_out, c, "output");
  if (!r || !c.backward) return r;
  const Tensor dy = loss_weights(c, cpu_out[0]);
  Tensors dev_grads, cpu_grads;
  if (auto b = checked_backward(guard, "backward" + on, c, dev_in, dy.to(device), &dev_grads); !b) return b;
  if (auto b = checked_backward(guard, "backward on cpu", c, cpu_in, dy, &cpu_grads); !b) return b;
  return same_outputs(dev_grads, cpu_grads, c, "gradient");
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
