// kernels/dropout.h: dropout_forward and dropout_backward with fixed keys for every floating
// dtype at p = 0, 0.5 and 0.9 on an odd shape, and with a step and an offset moving the
// counters on a shape large enough that the CUDA grid-stride loops wrap. The reference
// draws the mask from core/philox.h itself (test/ops/reference_layers.h) and rounds the
// kept values as the stored dtype does: exact. Both backends run the same element body
// (kernels/dropout_bodies.h): bit for bit.
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "test/ops/harness.h"
#include "test/ops/reference_layers.h"

namespace gridnn::test {
namespace {

constexpr DType kFloating[] = {DType::f32, DType::f16, DType::bf16};
const Shape kOdd{3, 5, 7};
const Shape kLarge{(int64_t(1) << 21) + 7};  // more elements than threads in the CUDA grid

Tensor apply(bool forward, const Tensor& in, float p, const ops::DropoutKey& key) {
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  if (forward)
    ops::dropout_forward(in, p, key, out);
  else
    ops::dropout_backward(in, p, key, out);
  return out;
}

std::string key_name(const ops::DropoutKey& k) {
  return "key " + std::to_string(k.seed) + "/" + std::to_string(k.stream) + " step " + std::to_string(k.step) +
         " offset " + std::to_string(k.offset);
}

// The forward (on x) or the backward (on dy): the same mask, applied to the case's input.
OpCase dropout_case(bool forward, const Shape& shape, DType dt, float p, const ops::DropoutKey& key) {
  OpCase c;
  c.op = forward ? "dropout_forward" : "dropout_backward";
  c.params = shape_name(shape) + " p " + std::to_string(p).substr(0, 3) + " " + key_name(key) + " " + dtype_name(dt);
  const std::string name = c.op + c.params;
  c.make_inputs = [=] { return Tensors{case_input(name, 0, shape, -1.0f, 1.0f, dt)}; };
  c.run = [=](const Tensors& in) { return Tensors{apply(forward, in[0], p, key)}; };
  c.reference = [=](const Tensors& in) {
    Doubles y = reference_dropout(values(in[0]), p, key);
    // A 16-bit output rounds the float product once more, as storing it in `dt` does.
    if (dt != DType::f32) y = values(ops::cast(tensor_of(y, shape), dt));
    return std::vector<Doubles>{y};
  };
  c.ref_tol = {0, 0};
  c.bitwise = true;
  if (forward && dt == DType::f32 && shape.numel() < 1000) {
    c.backward = [=](const Tensors&, const Tensor& dy) { return Tensors{apply(false, dy, p, key)}; };
    c.grad_inputs = {0};
  }
  return c;
}

}  // namespace

void add_dropout_cases(OpCases& cases) {
  const ops::DropoutKey key{11, 22, 3, 0};
  for (float p : {0.0f, 0.5f, 0.9f})
    for (DType dt : kFloating) {
      cases.push_back(dropout_case(true, kOdd, dt, p, key));
      if (dt == DType::f32 || p == 0.5f) cases.push_back(dropout_case(false, kOdd, dt, p, key));
    }
  const ops::DropoutKey moved{5, 6, 7, 1000};
  for (DType dt : kFloating) {
    cases.push_back(dropout_case(true, kLarge, dt, 0.3f, moved));
    cases.push_back(dropout_case(false, kLarge, dt, 0.3f, moved));
  }
}

}  // namespace gridnn::test
