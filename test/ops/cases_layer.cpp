// The layers without a family of their own, as layer cases (test/ops/layer_case.h): ReLU,
// Flatten, Dropout (fixed keys: deterministic), Linear with and without bias,
// PointwiseConv3d and SelfAttention3d (gamma nonzero, and zero: the identity), and the
// softmax cross-entropy loss, which is no Module and is a case on its functions. The
// references are test/ops/reference_layers.h, with the layers' tests' tolerances. ReLU,
// Flatten and Dropout agree across backends bit for bit; the layers built on cuBLAS within
// the tolerances of the layers' former GPU tests.
#include "core/philox.h"
#include "kernels/elementwise.h"
#include "models/layers/activation.h"
#include "models/layers/attention.h"
#include "models/layers/dropout.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "test/ops/layer_case.h"
#include "test/ops/reference_layers.h"

namespace gridnn::test {
namespace {

// ---- ReLU, Flatten, Dropout ------------------------------------------------------------

void add_activation_cases(OpCases& cases) {
  OpCase relu = layer_case("ReLU", "f32", [] { return std::make_unique<nn::ReLU>(); }, {2, 3, 4, 5});
  relu.reference = [](const Tensors& in) {
    Doubles y = values(in[0]);
    for (double& v : y) v = v > 0 ? v : 0.0;
    return std::vector<Doubles>{y};
  };
  relu.ref_tol = {0, 0};
  relu.bitwise = true;
  relu.grad.skip_kinks = true;
  cases.push_back(relu);

  OpCase flatten = layer_case("Flatten", "f32", [] { return std::make_unique<nn::Flatten>(); }, {2, 3, 4, 5});
  flatten.reference = [](const Tensors& in) { return std::vector<Doubles>{values(in[0])}; };
  flatten.ref_tol = {0, 0};
  flatten.bitwise = true;
  cases.push_back(flatten);
}

struct DropoutSetup {
  float p;
  uint64_t seed, step;
  int64_t first_sample;  // a batch shard's first sample: the mask of the full batch's rows
  Shape shape;
  bool training;
};

void add_dropout_layer_cases(OpCases& cases) {
  const DropoutSetup setups[] = {
      {0.5f, 3, 0, 0, {4, 8, 3, 3, 3}, true},  // the key Module::initialize(3) sets
      {0.35f, 13, 2, 0, {3, 4, 3}, true},      // a later step
      {0.4f, 1, 0, 2, {3, 3, 5}, true},        // a batch shard from sample 2
      {0.0f, 5, 0, 0, {4, 9}, true},           // p = 0: the identity
      {0.5f, 5, 0, 0, {4, 9}, false},          // evaluation: the identity
  };
  for (const DropoutSetup& s : setups) {
    const std::string what = "p " + std::to_string(s.p).substr(0, 4) + " seed " + std::to_string(s.seed) + " step " +
                             std::to_string(s.step) + " first sample " + std::to_string(s.first_sample);
    OpCase c = layer_case(
        "Dropout", what,
        [s] {
          auto d = std::make_unique<nn::Dropout>(s.p);
          d->set_key(s.seed, "mask");
          d->set_step(s.step);
          d->set_batch_offset(s.first_sample);
          return d;
        },
        s.shape, s.training);
    c.reference = [s](const Tensors& in) {
      if (!s.training || s.p == 0.0f) return std::vector<Doubles>{values(in[0])};
      const int64_t per_sample = s.shape.numel() / s.shape[0];
      const ops::DropoutKey key{s.seed, philox_stream_id("mask"), s.step, s.first_sample * per_sample};
      return std::vector<Doubles>{reference_dropout(values(in[0]), s.p, key)};
    };
    c.ref_tol = {0, 0};
    c.bitwise = true;
    cases.push_back(c);
  }
}

// ---- Linear, PointwiseConv3d -----------------------------------------------------------

void add_linear_cases(OpCases& cases) {
  struct Setup {
    int64_t in, out, n;
    bool bias;
  };
  // The layer test's 13 -> 9 and the GPU test's 70 -> 19 (one sample and 33).
  const Setup setups[] = {{13, 9, 1, true},  {13, 9, 5, true},  {13, 9, 1, false},
                          {13, 9, 5, false}, {70, 19, 1, true}, {70, 19, 33, true}};
  for (const Setup& s : setups) {
    OpCase c =
        layer_case("Linear", std::to_string(s.in) + "_to_" + std::to_string(s.out) + (s.bias ? " bias" : " no bias"),
                   [s] { return std::make_unique<nn::Linear>(s.in, s.out, s.bias); }, {s.n, s.in});
    c.reference = [s](const Tensors& in) {
      return std::vector<Doubles>{
          reference_linear(values(in[0]), values(in[1]), s.bias ? values(in[2]) : Doubles{}, s.n, s.in, s.out)};
    };
    c.ref_tol = {1e-6, 1e-5};
    c.backend_tol = {1e-5, 1e-5};
    cases.push_back(c);
  }
}

void add_pointwise_conv_cases(OpCases& cases) {
  for (int64_t b : {1, 3}) {
    OpCase c = layer_case("PointwiseConv3d", "5_to_3", [] { return std::make_unique<nn::PointwiseConv3d>(5, 3); },
                          {b, 5, 2, 3, 1});
    c.reference = [b](const Tensors& in) {
      return std::vector<Doubles>{reference_pointwise_conv3d(values(in[0]), values(in[1]), values(in[2]), b, 5, 3, 6)};
    };
    c.ref_tol = {1e-6, 1e-5};
    c.backend_tol = {1e-5, 1e-5};
    cases.push_back(c);
  }
}

// ---- SelfAttention3d -------------------------------------------------------------------

// A SelfAttention3d layer case whose gamma (input 1, the first parameter; it starts at 0)
// is `gamma` and whose x is drawn in [-2, 2]. Output y; backward: dx and every parameter's
// gradient.
OpCase attention_case(const Shape& x, double gamma, ops::MathMode math = ops::MathMode::fp32) {
  const int64_t channels = x[1];
  std::string what = "gamma " + std::to_string(gamma).substr(0, 4);
  if (math != ops::MathMode::fp32) what += std::string(" ") + ops::str(math);
  OpCase c = layer_case(
      "SelfAttention3d", what,
      [channels, math] {
        auto a = std::make_unique<nn::SelfAttention3d>(channels);
        a->set_math_mode(math);
        return a;
      },
      x);
  auto draw = c.make_inputs;
  c.make_inputs = [draw, gamma] {
    Tensors in = draw();
    ops::scale(in[0], 2.0f);  // exact: [-1, 1) becomes [-2, 2)
    ops::fill(in[1], gamma);
    return in;
  };
  c.reference = [](const Tensors& in) {
    return std::vector<Doubles>{reference_attention(in[0], Tensors(in.begin() + 1, in.end())).y};
  };
  c.ref_tol = {1e-5, 1e-4};
  c.grad.max_points = 48;
  // What the GPU test allowed the parameter gradients (sums over every position and
  // sample); y and dx are held to 1e-4 by the "y dx" cases.
  c.backend_tol = {1e-3, 1e-3};
  return c;
}

// The same layer with output y and backward dx alone, for their tighter backend tolerance;
// without a backward for a volume too large for central differences.
OpCase attention_y_dx_case(const Shape& x, bool with_backward) {
  OpCase c = attention_case(x, 0.7);
  c.params += with_backward ? " y dx" : " y";
  if (with_backward) {
    auto full = c.backward;
    c.backward = [full](const Tensors& in, const Tensor& dy) { return Tensors{full(in, dy)[0]}; };
    c.grad_inputs = {0};
  } else {
    c.backward = nullptr;
    c.grad_inputs.clear();
  }
  c.backend_tol = {1e-4, 1e-4};
  return c;
}

// The attention matrices A [B, N, N] of the forward, as the GPU test compared them.
OpCase attention_matrix_case(const Shape& x) {
  OpCase c = attention_case(x, 0.7);
  c.params += " attention matrix";
  c.run = [](const Tensors& in) {
    nn::SelfAttention3d att(in[0].size(1), in[0].device());
    auto params = att.named_parameters();
    for (size_t k = 0; k < params.size(); ++k) params[k].second->value.copy_from(in[k + 1]);
    att.forward(in[0]);
    return Tensors{att.attention().clone()};
  };
  c.reference = [](const Tensors& in) {
    return std::vector<Doubles>{reference_attention(in[0], Tensors(in.begin() + 1, in.end())).attention};
  };
  c.backward = nullptr;
  c.grad_inputs.clear();
  c.ref_tol = {1e-7, 1e-5};  // as softmax_forward's
  c.backend_tol = {1e-5, 1e-4};
  return c;
}

void add_attention_cases(OpCases& cases) {
  // The layer test's volumes and its gradient volume, with every gradient checked.
  for (const Shape& x : {Shape{1, 8, 3, 2, 5}, Shape{2, 8, 3, 1, 2}, Shape{3, 16, 2, 3, 3}})
    cases.push_back(attention_case(x, 0.7));
  // The GPU test's volumes: every gradient (1e-3), y and dx (1e-4), the attention matrices.
  for (const Shape& x : {Shape{1, 8, 1, 1, 1}, Shape{2, 16, 3, 4, 5}}) {
    cases.push_back(attention_case(x, 0.7));
    cases.push_back(attention_y_dx_case(x, true));
    cases.push_back(attention_matrix_case(x));
  }
  cases.push_back(attention_y_dx_case({3, 32, 8, 8, 8}, false));
  cases.push_back(attention_matrix_case({3, 32, 8, 8, 8}));

  // gamma = 0 (its initial value): y = x exactly, and only gamma gets a gradient.
  OpCase identity = attention_case({2, 8, 1, 2, 3}, 0.0);
  identity.ref_tol = {0, 0};
  cases.push_back(identity);

  // bf16 operands (Module::set_math_mode) against the fp32 reference, forward only: the
  // operands' rounding moves y by about 1e-3 of its scale, softmax amplifying it a little.
  // The precision tests allow the CPU's bf16 1e-2 and the GPU's 2e-2 of max |y| against
  // fp32; |x| reaches 2 here, so these absolute bounds are no looser (and the device is
  // now compared with the CPU's bf16, not with fp32).
  OpCase bf16 = attention_case({2, 32, 4, 4, 3}, 0.75, ops::MathMode::bf16);
  bf16.backward = nullptr;
  bf16.grad_inputs.clear();
  bf16.ref_tol = {1e-2, 0};
  bf16.backend_tol = {2e-2, 0};
  cases.push_back(bf16);
}

// ---- the softmax cross-entropy loss ----------------------------------------------------

// nn::SoftmaxCrossEntropy on logits [n, classes] in [-4, 4] and labels (i * step + 3) mod
// classes. Outputs: the mean loss, the loss sum, backward() (divisor n) and
// backward(divisor) (a global batch); the backward of the mean loss scales backward().
OpCase loss_case(int64_t n, int64_t classes, int64_t step, int64_t divisor) {
  OpCase c;
  c.op = "SoftmaxCrossEntropy";
  c.params = std::to_string(n) + "x" + std::to_string(classes) + " divisor " + std::to_string(divisor);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < n; ++i) labels.push_back((i * step + 3) % classes);
    return Tensors{case_input(key, 0, {n, classes}, -4.0f, 4.0f), Tensor::from_vector(labels, {n})};
  };
  c.run = [divisor](const Tensors& in) {
    nn::SoftmaxCrossEntropy loss;
    const float mean = loss.forward(in[0], in[1]);
    return Tensors{tensor_of({mean}, {1}), tensor_of({loss.loss_sum()}, {1}), loss.backward(), loss.backward(divisor)};
  };
  c.reference = [=](const Tensors& in) {
    const std::vector<int64_t> labels = in[1].to_host().to_vector<int64_t>();
    const CrossEntropyReference r = reference_cross_entropy(values(in[0]), labels, classes);
    return std::vector<Doubles>{{r.mean()},
                                {r.sum()},
                                reference_cross_entropy_grad(r.probs, labels, classes, 1.0 / double(n)),
                                reference_cross_entropy_grad(r.probs, labels, classes, 1.0 / double(divisor))};
  };
  c.ref_tol = {1e-7, 1e-5};
  c.backend_tol = {1e-7, 1e-5};
  c.backward = [](const Tensors& in, const Tensor& dy) {
    nn::SoftmaxCrossEntropy loss;
    loss.forward(in[0], in[1]);
    Tensor dlogits = loss.backward();
    ops::scale(dlogits, float(values(dy)[0]));
    return Tensors{dlogits};
  };
  c.grad_inputs = {0};
  c.grad.atol = 2e-4;
  return c;
}

}  // namespace

void add_layer_cases(OpCases& cases) {
  add_activation_cases(cases);
  add_dropout_layer_cases(cases);
  add_linear_cases(cases);
  add_pointwise_conv_cases(cases);
  add_attention_cases(cases);
  // The layer test's shapes (one class, fewer than the lanes, 101) and the GPU test's.
  cases.push_back(loss_case(1, 1, 7, 32));
  cases.push_back(loss_case(1, 5, 7, 32));
  cases.push_back(loss_case(7, 3, 7, 32));
  cases.push_back(loss_case(4, 101, 7, 32));
  cases.push_back(loss_case(37, 11, 5, 128));
}

}  // namespace gridnn::test
