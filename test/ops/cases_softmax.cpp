// kernels/softmax.h: softmax forward and backward for every floating dtype on rows of one
// column, rows shorter than the 32 lanes, rows of 33 (a lane wraps), rows of 1000 in a 3-D
// tensor, many short rows and rows longer than 1024 columns; huge logits in place; the
// softmax cross-entropy forward (per-row loss and probabilities, huge logits too) and
// backward, in place too. References: test/ops/reference_layers.h. Both backends reduce a
// row in the same lane and tree order, but expf and logf may differ in the last bits, so
// they agree within a tolerance; cross_entropy_backward (one subtraction and one product
// per element) agrees bit for bit.
#include "kernels/elementwise.h"
#include "kernels/softmax.h"
#include "test/ops/harness.h"
#include "test/ops/reference_layers.h"
#include "test/support/gpu_test.h"

namespace gridnn::test {
namespace {

constexpr DType kFloating[] = {DType::f32, DType::f16, DType::bf16};
const Shape kShapes[] = {{1, 1}, {1, 7}, {7, 33}, {3, 5, 1000}, {4096, 64}, {5, 70001}};

int64_t cols_of(const Shape& s) { return s[s.rank() - 1]; }
int64_t rows_of(const Shape& s) { return s.numel() / cols_of(s); }
// Small enough for central differences in the grad mode; the others run without a backward.
bool grad_checked(const Shape& s) { return s.numel() <= 20000; }

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// f32: the softmax test's (the float rounding of exp and of the row sums); a 16-bit result
// adds one rounding of its format (relative 2^-11 for f16, 2^-9 for bf16).
Tolerance softmax_tolerance(DType dt) {
  if (dt == DType::f16) return {1e-3, 1e-3};
  if (dt == DType::bf16) return {1e-3, 8e-3};
  return {1e-7, 1e-5};
}

// Rows of probabilities (the softmax of logits in [-6, 6], in double) stored in `dt`: a
// softmax output as the backward and the cross-entropy gradient receive it.
Tensor probability_rows(const std::string& key, const Shape& shape, DType dt) {
  const Tensor logits = case_input(key, 0, shape, -6.0f, 6.0f);
  const Tensor p = tensor_of(reference_softmax(values(logits), rows_of(shape), cols_of(shape)), shape);
  return dt == DType::f32 ? p : ops::cast(p, dt);
}

// Labels (i * step + 3) mod classes: with step coprime to classes, n consecutive rows
// cover min(n, classes) classes.
Tensor labels_for(int64_t n, int64_t classes, int64_t step) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((i * step + 3) % classes);
  return Tensor::from_vector(v, {n});
}
std::vector<int64_t> labels_of(const Tensor& t) { return t.to_host().to_vector<int64_t>(); }

Tensor softmax_of(const Tensor& x) {
  Tensor y = like(x);
  ops::softmax_forward(x, y);
  return y;
}

OpCase softmax_case(const Shape& shape, DType dt) {
  OpCase c;
  c.op = "softmax_forward";
  c.params = shape_name(shape) + " " + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{case_input(key, 0, shape, -8.0f, 8.0f, dt)}; };
  c.run = [](const Tensors& in) { return Tensors{softmax_of(in[0])}; };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{reference_softmax(values(in[0]), rows_of(shape), cols_of(shape))};
  };
  c.ref_tol = softmax_tolerance(dt);
  c.backend_tol = tolerance_for(dt, {1e-7, 1e-5});
  if (dt == DType::f32 && grad_checked(shape)) {
    c.backward = [](const Tensors& in, const Tensor& dy) {
      Tensor dx = like(dy);
      ops::softmax_backward(softmax_of(in[0]), dy, dx);
      return Tensors{dx};
    };
    c.grad_inputs = {0};
  }
  return c;
}

// dx from y (rows of probabilities) and dy; in place: dx written over a copy of dy.
OpCase softmax_backward_case(const Shape& shape, DType dt, bool in_place) {
  OpCase c;
  c.op = "softmax_backward";
  c.params = shape_name(shape) + (in_place ? " in place " : " ") + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{probability_rows(key, shape, dt), case_input(key, 1, shape, -1.0f, 1.0f, dt)}; };
  c.run = [in_place](const Tensors& in) {
    Tensor dx = in_place ? in[1].clone() : like(in[1]);
    ops::softmax_backward(in[0], in_place ? dx : in[1], dx);
    return Tensors{dx};
  };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{
        reference_softmax_backward(values(in[0]), values(in[1]), rows_of(shape), cols_of(shape))};
  };
  c.ref_tol = softmax_tolerance(dt);
  c.backend_tol = tolerance_for(dt, {1e-7, 1e-5});
  return c;
}

// Outputs row_loss [n] and probs [n, classes]: the loss first, so that the grad mode checks
// the gradient cross_entropy_backward computes. With dL/d(row_loss) = w, dL/dlogits row i
// is w_i (p_i - onehot_i): cross_entropy_backward of that row with scale w_i.
OpCase cross_entropy_case(int64_t n, int64_t classes, int64_t label_step, bool with_backward) {
  OpCase c;
  c.op = "cross_entropy_forward";
  c.params = std::to_string(n) + "x" + std::to_string(classes);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    return Tensors{case_input(key, 0, {n, classes}, -5.0f, 5.0f), labels_for(n, classes, label_step)};
  };
  c.run = [n](const Tensors& in) {
    Tensor probs = like(in[0]), row_loss = Tensor::empty({n}, DType::f32, in[0].device());
    ops::cross_entropy_forward(in[0], in[1], probs, row_loss);
    return Tensors{row_loss, probs};
  };
  c.reference = [classes](const Tensors& in) {
    const CrossEntropyReference r = reference_cross_entropy(values(in[0]), labels_of(in[1]), classes);
    return std::vector<Doubles>{r.row_loss, r.probs};
  };
  c.ref_tol = {1e-7, 1e-5};
  // Across backends the loss of a row, (m + log s) - x[label], may move by a unit in the
  // last place of the log-sum-exp (|lse| < 16 here: 1e-6) however small the loss is.
  c.backend_tol = {2e-6, 1e-5};
  if (with_backward) {
    c.backward = [n](const Tensors& in, const Tensor& dy) {
      Tensor probs = like(in[0]), row_loss = Tensor::empty({n}, DType::f32, in[0].device());
      ops::cross_entropy_forward(in[0], in[1], probs, row_loss);
      const Doubles w = values(dy);
      Tensor dlogits = like(in[0]);
      for (int64_t i = 0; i < n; ++i) {
        Tensor row = dlogits.narrow(i, 1);
        ops::cross_entropy_backward(probs.narrow(i, 1), in[1].narrow(i, 1), float(w[size_t(i)]), row);
      }
      return Tensors{dlogits};
    };
    c.grad_inputs = {0};
  }
  return c;
}

// dlogits = (probs - onehot) * scale, from rows of probabilities.
OpCase cross_entropy_backward_case(int64_t n, int64_t classes, float scale, bool in_place) {
  OpCase c;
  c.op = "cross_entropy_backward";
  c.params = std::to_string(n) + "x" + std::to_string(classes) + " scale 1/" + std::to_string(int(1 / scale + 0.5f)) +
             (in_place ? " in place" : "");
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{probability_rows(key, {n, classes}, DType::f32), labels_for(n, classes, 7)}; };
  c.run = [=](const Tensors& in) {
    Tensor dlogits = in_place ? in[0].clone() : like(in[0]);
    ops::cross_entropy_backward(in_place ? dlogits : in[0], in[1], scale, dlogits);
    return Tensors{dlogits};
  };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{reference_cross_entropy_grad(values(in[0]), labels_of(in[1]), classes, scale)};
  };
  c.ref_tol = {1e-7, 1e-5};
  c.bitwise = true;
  return c;
}

}  // namespace

void add_softmax_cases(OpCases& cases) {
  for (const Shape& shape : kShapes)
    for (DType dt : kFloating) {
      cases.push_back(softmax_case(shape, dt));
      cases.push_back(softmax_backward_case(shape, dt, false));
    }
  cases.push_back(softmax_backward_case({2, 3, 65}, DType::f32, true));

  // Logits far beyond expf's range: finite, and the in-place path (y = x).
  OpCase huge = softmax_case({2, 3}, DType::f32);
  huge.params = "2x3 huge logits in place f32";
  huge.make_inputs = [] {
    return Tensors{Tensor::from_vector(std::vector<float>{1000.0f, 1001.0f, -1000.0f, 88.0f, 89.0f, 90.0f}, {2, 3})};
  };
  huge.run = [](const Tensors& in) {
    Tensor y = in[0].clone();
    ops::softmax_forward(y, y);
    return Tensors{y};
  };
  huge.backward = nullptr;
  huge.grad_inputs.clear();
  cases.push_back(huge);

  // Classes: one, fewer than the lanes, 101, more than 1024; many rows without a backward.
  cases.push_back(cross_entropy_case(1, 1, 7, true));
  cases.push_back(cross_entropy_case(1, 5, 7, true));
  cases.push_back(cross_entropy_case(7, 3, 7, true));
  cases.push_back(cross_entropy_case(4, 101, 7, true));
  cases.push_back(cross_entropy_case(37, 11, 5, true));
  cases.push_back(cross_entropy_case(3, 2000, 7, true));
  cases.push_back(cross_entropy_case(4096, 10, 7, false));
  // Row 0: lse = 1000, loss 2000; row 1: three equal logits, loss log 3. The float loss
  // of row 1 is 500 + log 3 - 500: within half a unit of 500 (3e-5) of log 3, on either
  // backend.
  OpCase huge_ce = cross_entropy_case(2, 3, 1, false);
  huge_ce.params = "2x3 huge logits";
  huge_ce.make_inputs = [] {
    return Tensors{Tensor::from_vector(std::vector<float>{1000.0f, -1000.0f, 0.0f, 500.0f, 500.0f, 500.0f}, {2, 3}),
                   Tensor::from_vector(std::vector<int64_t>{1, 2}, {2})};
  };
  huge_ce.ref_tol = huge_ce.backend_tol = {1e-4, 1e-7};
  cases.push_back(huge_ce);

  cases.push_back(cross_entropy_backward_case(7, 3, 1.0f / 7, false));
  cases.push_back(cross_entropy_backward_case(37, 11, 1.0f / 128, false));
  cases.push_back(cross_entropy_backward_case(37, 11, 1.0f / 37, true));
  cases.push_back(cross_entropy_backward_case(3, 2000, 1.0f / 3, false));
  cases.push_back(cross_entropy_backward_case(4096, 10, 1.0f / 4096, false));
}

}  // namespace gridnn::test
