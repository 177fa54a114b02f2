// The op harness (docs/design.md §9): every kernel op and every layer as a table of cases,
// checked in four modes, in the spirit of ggml's test-backend-ops.
//
//   ref      the op on the CPU against plain double-precision loops, within a tolerance
//   grad     its backward against central differences of L = sum(output0 * w)
//   backend  the op on cuda:0 against the same op on the CPU, bit for bit or within a
//            tolerance (outputs and, where the case has one, its backward's gradients),
//            and a second run on the device equal to the first bit for bit
//   perf     a timing table: time per run, memory traffic and, for ops with a choice, the
//            implementation that ran each case on the CPU (oneDNN or vol2col + GEMM)
//
// A case is an op applied to inputs: `make_inputs` draws them on the CPU (deterministic),
// `run` applies the op on whatever device its inputs are on and returns its outputs.
// A layer is a case too: its inputs are x and then its parameters (test/ops/layer_case.h),
// so the grad mode checks the parameters' gradients as well as the input's.
//
// Every run and backward in the ref, grad and backend modes must leave its inputs as they
// were, bit for bit (an op that works in place works on a clone it makes in `run`), and
// must write no byte outside the memory it was given or allocated: every block allocated
// while a case is checked has guard regions around it (test/ops/guarded_memory.h), checked
// after each run on the CPU and on the device.
//
// The cases are registered by one function per family (cases_<family>.cpp, listed in
// registry.cpp); `test-ops -m MODE [-f FAMILY] [-o REGEX]` (main.cpp) runs any mode on any
// of them, which is how CTest runs them (test/ops/CMakeLists.txt: one test per family and
// mode, one for the backend mode).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "test/support/grad_check.h"
#include "test/support/tensor_compare.h"

namespace gridnn::test {

using Tensors = std::vector<Tensor>;
using Doubles = std::vector<double>;

struct OpCase {
  std::string family;  // the file that registers it: "conv3d" for cases_conv3d.cpp (set by the registry)
  std::string op;      // what runs: "conv3d_forward", "Conv3d" (a layer)
  std::string params;  // its shape and options: "3x3x3_pad1 f32"
  // The inputs, drawn on the CPU, identical on every call.
  std::function<Tensors()> make_inputs;
  // The op applied to `in` on their device (CPU or cuda:0); returns its outputs.
  std::function<Tensors(const Tensors& in)> run;

  // perf: what runs the op on the CPU when it has a choice ("onednn jit:avx512_core",
  // "vol2col+gemm"); unset for ops with one implementation.
  std::function<std::string()> implementation;

  // ref: each output from the CPU inputs, by plain loops in double (no kernel under test).
  // Unset for a case checked only against the CPU (backend mode).
  std::function<std::vector<Doubles>(const Tensors& in)> reference;
  Tolerance ref_tol{1e-5, 1e-5};

  // backend: the device's outputs equal the CPU's bit for bit, or agree within backend_tol.
  bool bitwise = false;
  Tolerance backend_tol{1e-5, 1e-4};

  // grad: dL/d(in[i]) for each i in grad_inputs, in that order, given dL/d(output 0) = dy.
  // Unset for an op without a backward (or when the op is itself a backward).
  std::function<Tensors(const Tensors& in, const Tensor& dy)> backward;
  std::vector<int> grad_inputs;
  GradCheckOptions grad;

  // "op/params" as a GoogleTest name: letters, digits and underscores.
  std::string name() const;
  bool has_reference() const { return bool(reference); }
  bool has_gradient() const { return bool(backward); }
};

using OpCases = std::vector<OpCase>;

// Every case, in registry order (built once).
const OpCases& all_op_cases();
// The families, in registry order: "elementwise", "reduce", ...
std::vector<std::string> op_families();
// The cases of one family (registry.cpp).
void add_elementwise_cases(OpCases& cases);
void add_reduce_cases(OpCases& cases);
void add_gemm_cases(OpCases& cases);
void add_layout_cases(OpCases& cases);
void add_random_cases(OpCases& cases);
void add_conv3d_cases(OpCases& cases);
void add_pool3d_cases(OpCases& cases);
void add_batchnorm_cases(OpCases& cases);
void add_softmax_cases(OpCases& cases);
void add_dropout_cases(OpCases& cases);
void add_optim_cases(OpCases& cases);
void add_layer_cases(OpCases& cases);

// The modes. Each returns success or what differs, naming the output (or the input that
// changed, or the memory written outside).
::testing::AssertionResult check_reference(const OpCase& c);
::testing::AssertionResult check_gradients(const OpCase& c);
// Needs a CUDA device (the caller skips without one).
::testing::AssertionResult check_backend(const OpCase& c, const Device& device);

struct Timing {
  int64_t runs = 0;
  double seconds_per_run = 0;
  double bytes_per_run = 0;  // inputs read plus outputs written
};
// Runs the case on `device` for at least `min_seconds` (and at least `min_runs` times)
// after one warm-up run.
Timing time_case(const OpCase& c, const Device& device, double min_seconds, int64_t min_runs);

// ---- helpers for writing cases --------------------------------------------------------

// `t`'s values as doubles (any dtype, any device).
inline Doubles values(const Tensor& t) { return to_doubles(t); }
// A CPU f32 tensor holding `v`.
Tensor tensor_of(const Doubles& v, const Shape& shape);
// Shape "2x3x4".
std::string shape_name(const Shape& s);
// Room for one rounding of a value stored in `dtype` (f32: `f32`).
Tolerance stored_tolerance(DType dtype, Tolerance f32 = {1e-6, 1e-6});
// A deterministic uniform CPU tensor for input `index` of the case `key`.
Tensor case_input(const std::string& key, int index, const Shape& shape, float lo = -1.0f, float hi = 1.0f,
                  DType dtype = DType::f32);

}  // namespace gridnn::test
