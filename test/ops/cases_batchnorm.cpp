// kernels/batchnorm.h: the channel sums (with and without a shift), moments (in place on the
// shift too), invstd, normalize (with the eval backward and the backward sums as its
// gradient), backward sums, backward input (training and eval) and the running-statistics
// update; the steps that read x or dy in f16 and bf16 too, on the former GPU test's shapes;
// the two-pass statistics of nn::BatchNorm3d on values around 1000 +- 0.5, whose variance
// must keep its digits; and the layer in training and evaluation (running statistics set),
// its training backward against the loops, and its running statistics after two steps.
// References: test/ops/reference_conv_pool_norm.h, at the tolerances of the layer's test.
// The kernels run the same bodies on both backends in the same order
// (kernels/batchnorm_bodies.h, no FMA contraction): bit for bit. The layer also adds its
// parameter gradients with axpy, a kernel built with contraction allowed (exact for its
// alpha of 1, but not stated by a shared body), so the layer is held to the former GPU
// test's tightest tolerance, that of the parameter gradients, for every output.
#include "kernels/batchnorm.h"
#include "models/layers/batchnorm3d.h"
#include "test/ops/harness.h"
#include "test/ops/layer_case.h"
#include "test/ops/reference_conv_pool_norm.h"

namespace gridnn::test {
namespace {

constexpr double kEps = 1e-5;

struct Input {
  Shape shape;
  float lo, hi;      // x uniform in [lo, hi)
  bool sixteen_bit;  // also in f16 and bf16
};

// The former GPU test's shapes, one whose planes are not a multiple of the lanes, and
// values around 1000 (E[x^2] - mean^2 in float would lose every digit of the variance).
const Input kSmall{{2, 3, 3, 4, 5}, -1.0f, 3.0f, true};
const Input kLarge{{4, 16, 17, 19, 23}, -1.0f, 3.0f, true};
const Input kOddPlanes{{2, 2, 17, 19, 23}, -1.0f, 1.0f, false};
const Input kLargeMean{{2, 2, 4, 5, 6}, 999.5f, 1000.5f, false};

std::vector<DType> dtypes_of(const Input& in) {
  if (in.sixteen_bit) return {DType::f32, DType::f16, DType::bf16};
  return {DType::f32};
}

int64_t count_of(const Shape& x) { return x.numel() / x[1]; }
Tensor channels_like(const Tensor& x) { return Tensor::empty({x.size(1)}, DType::f32, x.device()); }
Tensor sums_like(const Tensor& x) { return Tensor::empty({2, x.size(1)}, DType::f32, x.device()); }
Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
Doubles values_or_empty(const Tensor& t) { return t.defined() ? values(t) : Doubles{}; }

std::string params_name(const Input& in, DType dt, const std::string& what = "") {
  return shape_name(in.shape) + " " + dtype_name(dt) + what;
}
std::string range_name(const Input& in) {
  return " in " + std::to_string(int(in.lo)) + ".." + std::to_string(int(in.hi));
}

// A per-channel f32 tensor uniform in [lo, hi) (shift, mean, invstd, weight, ...).
Tensor channel_input(const std::string& key, int index, int64_t c, float lo, float hi) {
  return case_input(key, index, {c}, lo, hi);
}

// Inputs x (and shift); output the [2, C] sums around the shift.
OpCase channel_sums_case(const Input& x, DType dt, bool shift) {
  OpCase c;
  c.op = "batchnorm_channel_sums";
  c.params = params_name(x, dt, range_name(x) + (shift ? " shift" : ""));
  const std::string key = c.op + c.params;
  const int64_t ch = x.shape[1];
  // Around the data: near 1000 where the data are (the mean the layer's second pass passes).
  const float s_lo = x.lo > 100 ? 999.0f : -1.0f, s_hi = x.lo > 100 ? 1001.0f : 1.0f;
  c.make_inputs = [=] {
    Tensors in{case_input(key, 0, x.shape, x.lo, x.hi, dt)};
    if (shift) in.push_back(channel_input(key, 1, ch, s_lo, s_hi));
    return in;
  };
  c.run = [shift](const Tensors& in) {
    Tensor sums = sums_like(in[0]);
    ops::batchnorm_channel_sums(in[0], shift ? in[1] : Tensor(), sums);
    return Tensors{sums};
  };
  c.reference = [shift](const Tensors& in) {
    return std::vector<Doubles>{reference_batchnorm_channel_sums(in[0], shift ? values(in[1]) : Doubles{})};
  };
  // Accumulated in double, rounded once to f32 (16-bit inputs are exact in float).
  c.ref_tol = {1e-6, 1e-6};
  c.bitwise = true;
  return c;
}

// Inputs the sums of a drawn x (around the shift, when there is one) and the shift;
// outputs mean (and var). `in_place`: mean written over the shift, as the layer does.
OpCase moments_case(const Input& x, bool shift, bool with_var, bool in_place) {
  OpCase c;
  c.op = "batchnorm_moments";
  c.params = params_name(x, DType::f32, range_name(x)) + (shift ? " shift" : "") + (with_var ? " var" : "") +
             (in_place ? " in place" : "");
  const std::string key = c.op + c.params;
  const int64_t ch = x.shape[1], count = count_of(x.shape);
  c.make_inputs = [=] {
    const Tensor data = case_input(key, 0, x.shape, x.lo, x.hi);
    Tensor s = shift ? tensor_of(reference_batchnorm_stats(data).mean, {ch}) : Tensor();
    Tensors in{tensor_of(reference_batchnorm_channel_sums(data, values_or_empty(s)), {2, ch})};
    if (shift) in.push_back(s);
    return in;
  };
  c.run = [=](const Tensors& in) {
    const Device d = in[0].device();
    Tensor mean = in_place ? in[1].clone() : Tensor::empty({ch}, DType::f32, d);
    Tensor var = with_var ? Tensor::empty({ch}, DType::f32, d) : Tensor();
    ops::batchnorm_moments(in[0], in_place ? mean : (shift ? in[1] : Tensor()), count, mean, var);
    return with_var ? Tensors{mean, var} : Tensors{mean};
  };
  c.reference = [=](const Tensors& in) {
    const BatchNormStats r = reference_batchnorm_moments(values(in[0]), shift ? values(in[1]) : Doubles{}, count);
    return with_var ? std::vector<Doubles>{r.mean, r.var} : std::vector<Doubles>{r.mean};
  };
  c.ref_tol = {1e-7, 1e-6};  // double from the f32 sums, rounded once
  c.bitwise = true;
  return c;
}

// Inputs var [C]; output 1 / sqrt(var + eps).
OpCase invstd_case(int64_t ch) {
  OpCase c;
  c.op = "batchnorm_invstd";
  c.params = std::to_string(ch) + " eps 1e-5";
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{channel_input(key, 0, ch, 0.0f, 3.0f)}; };
  c.run = [](const Tensors& in) {
    Tensor invstd = like(in[0]);
    ops::batchnorm_invstd(in[0], kEps, invstd);
    return Tensors{invstd};
  };
  c.reference = [](const Tensors& in) { return std::vector<Doubles>{reference_batchnorm_invstd(values(in[0]), kEps)}; };
  c.ref_tol = {0, 1e-7};  // double, rounded once
  c.bitwise = true;
  return c;
}

// Inputs x, mean, invstd (and weight, bias); output y. Its backward: dx by the eval
// backward input (dy * weight * invstd), dweight and dbias by the backward sums.
OpCase normalize_case(const Input& x, DType dt, bool affine) {
  OpCase c;
  c.op = "batchnorm_normalize";
  c.params = params_name(x, dt, affine ? " affine" : "");
  const std::string key = c.op + c.params;
  const int64_t ch = x.shape[1];
  c.make_inputs = [=] {
    Tensors in{case_input(key, 0, x.shape, x.lo, x.hi, dt), channel_input(key, 1, ch, 0.0f, 2.0f),
               channel_input(key, 2, ch, 0.5f, 2.0f)};
    if (affine) {
      in.push_back(channel_input(key, 3, ch, 0.5f, 2.0f));
      in.push_back(channel_input(key, 4, ch, -1.0f, 1.0f));
    }
    return in;
  };
  c.run = [affine](const Tensors& in) {
    Tensor y = like(in[0]);
    ops::batchnorm_normalize(in[0], in[1], in[2], affine ? in[3] : Tensor(), affine ? in[4] : Tensor(), y);
    return Tensors{y};
  };
  c.reference = [affine](const Tensors& in) {
    return std::vector<Doubles>{reference_batchnorm_normalize(
        in[0], values(in[1]), values(in[2]), affine ? values(in[3]) : Doubles{}, affine ? values(in[4]) : Doubles{})};
  };
  c.ref_tol = stored_tolerance(dt, {1e-5, 1e-5});
  c.bitwise = true;
  if (dt == DType::f32 && x.shape.numel() <= 4096) {
    c.backward = [affine](const Tensors& in, const Tensor& dy) {
      const Tensor weight = affine ? in[3] : Tensor();
      Tensor dx = like(in[0]), sums = sums_like(in[0]);
      ops::batchnorm_backward_input(in[0], dy, in[1], in[2], weight, Tensor(), 0, false, dx);
      if (!affine) return Tensors{dx};
      ops::batchnorm_backward_sums(in[0], dy, in[1], in[2], sums);
      const int64_t channels = in[1].numel();
      return Tensors{dx, sums.narrow(1, 1).reshape({channels}).clone(), sums.narrow(0, 1).reshape({channels}).clone()};
    };
    c.grad_inputs = affine ? std::vector<int>{0, 3, 4} : std::vector<int>{0};
  }
  return c;
}

// Inputs x, dy, mean, invstd; output [sum(dy); sum(dy * xhat)].
OpCase backward_sums_case(const Input& x, DType dt) {
  OpCase c;
  c.op = "batchnorm_backward_sums";
  c.params = params_name(x, dt);
  const std::string key = c.op + c.params;
  const int64_t ch = x.shape[1];
  c.make_inputs = [=] {
    return Tensors{case_input(key, 0, x.shape, x.lo, x.hi, dt), case_input(key, 1, x.shape, -1.0f, 1.0f, dt),
                   channel_input(key, 2, ch, -1.0f, 1.0f), channel_input(key, 3, ch, 0.5f, 2.0f)};
  };
  c.run = [](const Tensors& in) {
    Tensor sums = sums_like(in[0]);
    ops::batchnorm_backward_sums(in[0], in[1], in[2], in[3], sums);
    return Tensors{sums};
  };
  c.reference = [](const Tensors& in) {
    return std::vector<Doubles>{reference_batchnorm_backward_sums(in[0], in[1], values(in[2]), values(in[3]))};
  };
  c.ref_tol = {1e-6, 1e-6};  // accumulated in double, rounded once
  c.bitwise = true;
  return c;
}

// Inputs x, dy, the batch's mean and invstd, weight and the backward sums of (x, dy);
// output dx.
OpCase backward_input_case(const Input& x, DType dt, bool training) {
  OpCase c;
  c.op = "batchnorm_backward_input";
  c.params = params_name(x, dt, training ? " training" : " eval");
  const std::string key = c.op + c.params;
  const int64_t ch = x.shape[1], count = count_of(x.shape);
  c.make_inputs = [=] {
    const Tensor data = case_input(key, 0, x.shape, x.lo, x.hi, dt);
    const Tensor dy = case_input(key, 1, x.shape, -1.0f, 1.0f, dt);
    const BatchNormStats st = reference_batchnorm_stats(data);
    const Doubles invstd = reference_batchnorm_invstd(st.var, kEps);
    const Doubles sums = reference_batchnorm_backward_sums(data, dy, st.mean, invstd);
    return Tensors{data,
                   dy,
                   tensor_of(st.mean, {ch}),
                   tensor_of(invstd, {ch}),
                   channel_input(key, 2, ch, 0.5f, 2.0f),
                   tensor_of(sums, {2, ch})};
  };
  c.run = [=](const Tensors& in) {
    Tensor dx = like(in[0]);
    ops::batchnorm_backward_input(in[0], in[1], in[2], in[3], in[4], in[5], count, training, dx);
    return Tensors{dx};
  };
  c.reference = [=](const Tensors& in) {
    return std::vector<Doubles>{reference_batchnorm_backward_input(in[0], in[1], values(in[2]), values(in[3]),
                                                                   values(in[4]), values(in[5]), count, training)};
  };
  c.ref_tol = stored_tolerance(dt, {1e-5, 1e-4});
  c.bitwise = true;
  return c;
}

// Inputs mean, var, running_mean, running_var, num_batches_tracked; outputs the three
// updated (copies of the running inputs).
OpCase update_running_case(int64_t ch, int64_t count, double momentum) {
  OpCase c;
  c.op = "batchnorm_update_running";
  c.params =
      std::to_string(ch) + " count " + std::to_string(count) + " momentum " + std::to_string(momentum).substr(0, 4);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    return Tensors{channel_input(key, 0, ch, -1.0f, 1.0f), channel_input(key, 1, ch, 0.1f, 2.0f),
                   channel_input(key, 2, ch, -1.0f, 1.0f), channel_input(key, 3, ch, 0.5f, 2.0f),
                   Tensor::from_vector(std::vector<int64_t>{7}, Shape{})};
  };
  c.run = [=](const Tensors& in) {
    Tensor rm = in[2].clone(), rv = in[3].clone(), tracked = in[4].clone();
    ops::batchnorm_update_running(in[0], in[1], count, momentum, rm, rv, tracked);
    return Tensors{rm, rv, tracked};
  };
  c.reference = [=](const Tensors& in) {
    Doubles rm = values(in[2]), rv = values(in[3]);
    reference_batchnorm_update_running({values(in[0]), values(in[1]), count}, momentum, rm, rv);
    return std::vector<Doubles>{rm, rv, Doubles{values(in[4])[0] + 1}};
  };
  c.ref_tol = {1e-7, 1e-6};  // double, rounded once
  c.bitwise = true;
  return c;
}

// The layer's training statistics step by step (kernels/batchnorm.h's recipe): sum(x) ->
// mean, then the sums around that mean -> mean and the biased variance. Outputs mean, var.
OpCase statistics_case(const Input& x, DType dt, Tolerance tol) {
  OpCase c;
  c.op = "batchnorm_statistics";
  c.params = params_name(x, dt, range_name(x) + " two passes");
  const std::string key = c.op + c.params;
  const int64_t count = count_of(x.shape);
  c.make_inputs = [=] { return Tensors{case_input(key, 0, x.shape, x.lo, x.hi, dt)}; };
  c.run = [count](const Tensors& in) {
    Tensor sums = sums_like(in[0]), mean = channels_like(in[0]), var = channels_like(in[0]);
    const Tensor none;
    Tensor no_var;
    ops::batchnorm_channel_sums(in[0], none, sums);
    ops::batchnorm_moments(sums, none, count, mean, no_var);
    ops::batchnorm_channel_sums(in[0], mean, sums);
    ops::batchnorm_moments(sums, mean, count, mean, var);
    return Tensors{mean, var};
  };
  c.reference = [](const Tensors& in) {
    const BatchNormStats st = reference_batchnorm_stats(in[0]);
    return std::vector<Doubles>{st.mean, st.var};
  };
  c.ref_tol = tol;
  c.bitwise = true;
  return c;
}

// ---- the layer ---------------------------------------------------------------------------

// Running statistics the evaluation cases normalize with, drawn for `key`.
struct Running {
  Tensor mean, var;
};
Running running_for(const std::string& key, int64_t ch, float var_lo) {
  return {case_input(key + "/running", 0, {ch}, -1.0f, 1.0f), case_input(key + "/running", 1, {ch}, var_lo, 2.0f)};
}

// nn::BatchNorm3d(C) on x uniform in [lo, hi), its weight in [0.5, 2) and bias in [-1, 1)
// (away from 1 and 0, so that they matter; `affine` false: PyTorch's 1 and 0). Evaluation:
// running statistics drawn with the variance from var_lo.
OpCase bn_layer(const Input& x, bool training, bool affine = true, float var_lo = 0.5f) {
  const int64_t ch = x.shape[1];
  const std::string what = std::string(affine ? "affine" : "weight 1 bias 0") + range_name(x);
  const std::string key = "BatchNorm3d" + what + shape_name(x.shape) + (training ? "" : " eval");
  const Running run = training ? Running{} : running_for(key, ch, var_lo);
  OpCase c = layer_case(
      "BatchNorm3d", what,
      [=] {
        auto bn = std::make_unique<nn::BatchNorm3d>(ch);
        if (!training) {
          bn->running_mean().copy_from(run.mean);
          bn->running_var().copy_from(run.var);
        }
        return bn;
      },
      x.shape, training);
  c.make_inputs = [=] {
    Tensors in{case_input(key, 0, x.shape, x.lo, x.hi)};
    if (affine) return Tensors{in[0], channel_input(key, 1, ch, 0.5f, 2.0f), channel_input(key, 2, ch, -1.0f, 1.0f)};
    return Tensors{in[0], Tensor::from_vector(std::vector<float>(size_t(ch), 1.0f), {ch}), Tensor::zeros({ch})};
  };
  c.reference = [=](const Tensors& in) {
    const BatchNormStats st =
        training ? reference_batchnorm_stats(in[0]) : BatchNormStats{values(run.mean), values(run.var), 0};
    const Doubles invstd = reference_batchnorm_invstd(st.var, kEps);
    return std::vector<Doubles>{reference_batchnorm_normalize(in[0], st.mean, invstd, values(in[1]), values(in[2]))};
  };
  // The layer's test: training {2e-5, 1e-5} (the batch statistics' rounding), eval {1e-5, 1e-5}.
  c.ref_tol = training ? Tolerance{2e-5, 1e-5} : Tolerance{1e-5, 1e-5};
  c.backend_tol = {1e-6, 1e-6};
  return c;
}

// The layer's training backward against the loops: inputs x, weight, bias and dy; outputs
// dx, dL/dweight = sum(dy * xhat) and dL/dbias = sum(dy) per channel.
OpCase bn_layer_backward(const Input& x) {
  OpCase c = layer_backward_case(bn_layer(x, true), x.shape);
  const int64_t ch = x.shape[1];
  c.reference = [ch](const Tensors& in) {
    const BatchNormStats st = reference_batchnorm_stats(in[0]);
    const Doubles invstd = reference_batchnorm_invstd(st.var, kEps);
    const Doubles sums = reference_batchnorm_backward_sums(in[0], in[3], st.mean, invstd);
    return std::vector<Doubles>{
        reference_batchnorm_backward_input(in[0], in[3], st.mean, invstd, values(in[1]), sums, st.count, true),
        Doubles(sums.begin() + ch, sums.end()), Doubles(sums.begin(), sums.begin() + ch)};
  };
  c.ref_tol = {1e-5, 1e-5};
  return c;
}

// The running statistics after two training steps from PyTorch's initial (0, 1), and
// num_batches_tracked: inputs x1, x2; outputs running_mean, running_var, tracked.
OpCase running_statistics_case(const Shape& shape, float lo1, float hi1, float lo2, float hi2) {
  OpCase c;
  c.op = "BatchNorm3d";
  c.params = "running statistics after two steps " + shape_name(shape);
  const std::string key = c.op + c.params;
  const int64_t ch = shape[1];
  c.make_inputs = [=] { return Tensors{case_input(key, 0, shape, lo1, hi1), case_input(key, 1, shape, lo2, hi2)}; };
  c.run = [ch](const Tensors& in) {
    nn::BatchNorm3d bn(ch, kEps, 0.1, in[0].device());
    bn.forward(in[0]);
    bn.forward(in[1]);
    return Tensors{bn.running_mean().clone(), bn.running_var().clone(), bn.num_batches_tracked().clone()};
  };
  c.reference = [ch](const Tensors& in) {
    Doubles rm(size_t(ch), 0.0), rv(size_t(ch), 1.0);
    reference_batchnorm_update_running(reference_batchnorm_stats(in[0]), 0.1, rm, rv);
    reference_batchnorm_update_running(reference_batchnorm_stats(in[1]), 0.1, rm, rv);
    return std::vector<Doubles>{rm, rv, Doubles{2}};
  };
  c.ref_tol = {1e-6, 1e-6};
  c.backend_tol = {1e-7, 1e-6};
  return c;
}

}  // namespace

void add_batchnorm_cases(OpCases& cases) {
  for (const Input& x : {kSmall, kLarge, kOddPlanes, kLargeMean})
    for (DType dt : dtypes_of(x))
      for (bool shift : {false, true}) cases.push_back(channel_sums_case(x, dt, shift));

  for (const Input& x : {kSmall, kLargeMean}) {
    cases.push_back(moments_case(x, false, false, false));  // the first pass: the mean only
    cases.push_back(moments_case(x, true, true, false));
    cases.push_back(moments_case(x, true, true, true));
  }
  cases.push_back(invstd_case(7));
  for (const Input& x : {kSmall, kLarge})
    for (DType dt : dtypes_of(x)) {
      cases.push_back(normalize_case(x, dt, true));
      cases.push_back(backward_sums_case(x, dt));
      cases.push_back(backward_input_case(x, dt, true));
      cases.push_back(backward_input_case(x, dt, false));
    }
  cases.push_back(normalize_case(kSmall, DType::f32, false));
  cases.push_back(update_running_case(5, 60, 0.1));
  cases.push_back(update_running_case(3, 2, 1.0));  // the smallest count; momentum 1: the batch's

  cases.push_back(statistics_case(kSmall, DType::f32, {1e-7, 1e-6}));
  // Both within 1e-7 of the exact ones (the layer's test asks that of the mean, 1e-5 of the
  // variance): the two passes lose no digit of the variance.
  cases.push_back(statistics_case(kLargeMean, DType::f32, {0, 1e-7}));

  // The layer in training: the layer's test's shapes (two values per channel the fewest).
  for (const Input& x : {Input{{1, 2, 3, 4, 5}, -2, 3, false}, Input{{3, 4, 2, 3, 3}, -2, 3, false},
                         Input{{2, 1, 1, 1, 2}, -2, 3, false}, Input{{1, 2, 3, 2, 3}, -2, 2, false},
                         Input{{3, 3, 2, 2, 1}, -2, 2, false}, Input{{3, 5, 6, 7, 5}, -1, 4, false}})
    cases.push_back(bn_layer(x, true));
  cases.push_back(bn_layer_backward({{2, 3, 3, 2, 3}, -1, 1, false}));
  // Around 1000: y within the layer's test's {1e-4, 1e-4}. No backward: central differences
  // of values around 1000 drown in the rounding of the mean.
  OpCase large_mean = bn_layer(kLargeMean, true, false);
  large_mean.ref_tol = {1e-4, 1e-4};
  large_mean.backward = nullptr;
  large_mean.grad_inputs.clear();
  cases.push_back(large_mean);
  // Evaluation: the running statistics; one value per channel is fine here.
  cases.push_back(bn_layer({{2, 3, 3, 2, 3}, -1, 1, false}, false));
  cases.push_back(bn_layer({{2, 2, 3, 2, 2}, -1, 1, false}, false, true, 0.3f));
  cases.push_back(bn_layer({{1, 3, 1, 1, 1}, -1, 1, false}, false));
  cases.push_back(bn_layer({{3, 5, 6, 7, 5}, -1, 4, false}, false));

  cases.push_back(running_statistics_case({2, 3, 2, 3, 2}, -1.0f, 2.0f, 0.0f, 5.0f));
  cases.push_back(running_statistics_case({3, 5, 6, 7, 5}, -1.0f, 4.0f, -1.0f, 4.0f));
}

}  // namespace gridnn::test
