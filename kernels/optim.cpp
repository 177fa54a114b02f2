// Argument checks of kernels/optim.h, the float constants of each update and the dispatch
// to the CPU or CUDA backend.
#include "kernels/optim.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "kernels/checks.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

// `t` is an f32 tensor shaped and placed like `param`.
void expect_like_param(const char* op, const char* name, const Tensor& param, const Tensor& t) {
  expect_defined(op, name, t);
  GRIDNN_REQUIRE(t.dtype() == DType::f32, op, ": '", name, "' must be f32 (fp32 master weights and state), got ",
                 t.str());
  GRIDNN_REQUIRE(t.shape() == param.shape() && t.device() == param.device(), op, ": '", name, "' is ", t.str(),
                 " but the parameter is ", param.str(), "; give it the parameter's shape and device");
}

// No two of the named tensors share memory: each is read and written element by element.
void expect_no_aliasing(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  for (auto a = tensors.begin(); a != tensors.end(); ++a)
    for (auto b = a + 1; b != tensors.end(); ++b) {
      const Tensor& x = *a->second;
      const Tensor& y = *b->second;
      const bool same = x.numel() > 0 && x.shares_storage_with(y) && x.raw() == y.raw();
      GRIDNN_REQUIRE(!same && !x.overlaps_partially(y), op, ": '", a->first, "' and '", b->first,
                     "' share memory; each needs its own storage");
    }
}

using Hyper = std::initializer_list<std::pair<const char*, double>>;  // hyper-parameters by name

void expect_finite(const char* op, const char* name, double value) {
  GRIDNN_REQUIRE(std::isfinite(value), op, ": ", name, " must be finite, got ", value);
}

// Checks one parameter's SGD tensors and the spec; the update's float constants.
SgdConstants sgd_constants(const char* op, const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                           const SgdSpec& spec) {
  expect_like_param(op, "param", param, param);
  expect_like_param(op, "grad", param, grad);
  for (const auto& [name, v] : Hyper{{"lr", spec.lr},
                                     {"momentum", spec.momentum},
                                     {"dampening", spec.dampening},
                                     {"weight_decay", spec.weight_decay}})
    expect_finite(op, name, v);
  const bool with_momentum = spec.momentum != 0.0;
  if (with_momentum) {
    expect_like_param(op, "momentum_buffer", param, momentum_buffer);
    expect_no_aliasing(op, {{"param", &param}, {"grad", &grad}, {"momentum_buffer", &momentum_buffer}});
  } else {
    GRIDNN_REQUIRE(!spec.nesterov, op, ": nesterov needs momentum > 0");
    expect_no_aliasing(op, {{"param", &param}, {"grad", &grad}});
  }
  SgdConstants s;
  s.neg_lr = float(-spec.lr);
  s.weight_decay = float(spec.weight_decay);
  s.momentum = float(spec.momentum);
  s.one_minus_dampening = float(1.0 - spec.dampening);
  s.nesterov = spec.nesterov;
  s.first_step = spec.first_step;
  return s;
}

// Checks one parameter's Adam tensors and the spec; the update's float constants.
AdamConstants adam_constants(const char* op, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const AdamSpec& spec) {
  expect_like_param(op, "param", param, param);
  expect_like_param(op, "grad", param, grad);
  expect_like_param(op, "exp_avg", param, exp_avg);
  expect_like_param(op, "exp_avg_sq", param, exp_avg_sq);
  expect_no_aliasing(op, {{"param", &param}, {"grad", &grad}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}});
  for (const auto& [name, v] : Hyper{{"lr", spec.lr},
                                     {"beta1", spec.beta1},
                                     {"beta2", spec.beta2},
                                     {"eps", spec.eps},
                                     {"weight_decay", spec.weight_decay}})
    expect_finite(op, name, v);
  GRIDNN_REQUIRE(spec.bias_correction1 > 0.0 && spec.bias_correction2 > 0.0, op,
                 ": bias corrections must be > 0 (1 - beta^t at step t >= 1, beta < 1), got ", spec.bias_correction1,
                 " and ", spec.bias_correction2);
  AdamConstants s;
  s.decoupled = spec.decoupled;
  s.weight_decay = spec.decoupled ? 0.0f : float(spec.weight_decay);
  s.decay_factor = spec.decoupled ? float(1.0 - spec.lr * spec.weight_decay) : 1.0f;
  s.beta1 = float(spec.beta1);
  s.one_minus_beta1 = float(1.0 - spec.beta1);
  s.beta2 = float(spec.beta2);
  s.one_minus_beta2 = float(1.0 - spec.beta2);
  s.neg_step_size = float(-(spec.lr / spec.bias_correction1));
  s.bias_correction2_sqrt = float(std::sqrt(spec.bias_correction2));
  s.eps = float(spec.eps);
  return s;
}

// True when every entry's parameter is on one device (the list forms' one pass on the CPU,
// few launches on a GPU); otherwise each entry runs alone on its device.
template <class Entry>
bool on_one_device(const std::vector<Entry>& tensors) {
  for (const Entry& t : tensors)
    if (t.param->device() != tensors.front().param->device()) return false;
  return true;
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdSpec& spec) {
  const SgdConstants s = sgd_constants("sgd_update", param, grad, momentum_buffer, spec);
  if (param.numel() == 0) return;
  GRIDNN_BACKEND_CALL(param.device(), sgd_update, s, param, grad, momentum_buffer);
}

void sgd_update(const std::vector<SgdTensors>& tensors, const SgdSpec& spec) {
  SgdConstants s{};
  for (const SgdTensors& t : tensors) s = sgd_constants("sgd_update", *t.param, *t.grad, *t.momentum_buffer, spec);
  if (tensors.empty()) return;
  if (!on_one_device(tensors)) {
    for (const SgdTensors& t : tensors) sgd_update(*t.param, *t.grad, *t.momentum_buffer, spec);
    return;
  }
  GRIDNN_BACKEND_CALL(tensors.front().param->device(), sgd_update, s, tensors);
}

double adam_bias_correction(double beta, int64_t step) { return 1.0 - std::pow(beta, double(step)); }

void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamSpec& spec) {
  const AdamConstants s = adam_constants("adam_update", param, grad, exp_avg, exp_avg_sq, spec);
  if (param.numel() == 0) return;
  GRIDNN_BACKEND_CALL(param.device(), adam_update, s, param, grad, exp_avg, exp_avg_sq);
}

void adam_update(const std::vector<AdamTensors>& tensors, const AdamSpec& spec) {
  AdamConstants s{};
  for (const AdamTensors& t : tensors)
    s = adam_constants("adam_update", *t.param, *t.grad, *t.exp_avg, *t.exp_avg_sq, spec);
  if (tensors.empty()) return;
  if (!on_one_device(tensors)) {
    for (const AdamTensors& t : tensors) adam_update(*t.param, *t.grad, *t.exp_avg, *t.exp_avg_sq, spec);
    return;
  }
  GRIDNN_BACKEND_CALL(tensors.front().param->device(), adam_update, s, tensors);
}

}  // namespace gridnn::ops
