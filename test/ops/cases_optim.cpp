// kernels/optim.h: three steps of sgd_update (momentum 0 and 0.9, dampening, Nesterov, weight
// decay) and of adam_update (Adam with and without weight decay, AdamW) on an odd size and
// on one large enough that the CUDA grid-stride loops wrap, each step with its own gradient
// (the large size: one gradient for every step, as drawing millions of values is slow).
// The reference is PyTorch 1.13's formulas (torch/optim/sgd.py, adam.py, adamw.py) in
// double; the tolerance is that of test/models/optim's comparison with the same formulas
// (2e-6 of the parameters' scale, which is 1 here). The updates work in place, so `run`
// updates copies of the inputs and returns the parameter and its state. Both backends
// compile the same bodies without FMA contraction: bit for bit. No backward.
//
// The list forms run the same updates with the parameter cut into many tensors (an empty one
// among them; more than a GPU launch takes at once on the large size): element by element
// the same update, so the reference is the same.
#include <algorithm>
#include <cmath>

#include "kernels/optim.h"
#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

constexpr int kSteps = 3;
const int64_t kSizes[] = {1001, (int64_t(1) << 21) + 7};  // the second wraps the CUDA grid

// Rows of gradients: one per step, or one for every step on the large size.
int64_t gradient_rows(int64_t n) { return n > 100000 ? 1 : kSteps; }
// The gradient of step k: a row of the [rows, n] input.
Tensor gradient(const Tensor& grads, int k) { return grads.narrow(k % grads.size(0), 1).reshape({grads.size(1)}); }
double sgd_lr(int k) { return 0.03 / (1 + k); }  // a decaying schedule: each step its own rate

// The list forms' pieces of n elements: a repeating pattern of sizes, the last piece cut short.
std::vector<int64_t> list_pieces(int64_t n) {
  const int64_t pattern[] = {7, 0, 1, 300, 33, 5000, 70000};
  std::vector<int64_t> sizes;
  for (int64_t at = 0, k = 0; at < n; ++k) {
    sizes.push_back(std::min(pattern[k % 7], n - at));
    at += sizes.back();
  }
  return sizes;
}

// One flat parameter (or state) as the list form's tensors: a copy of each piece.
struct Pieces {
  std::vector<Tensor> parts;
  Pieces() = default;
  Pieces(const Tensor& flat, const std::vector<int64_t>& sizes) {
    int64_t at = 0;
    for (int64_t len : sizes) {
      parts.push_back(flat.narrow(at, len).clone());
      at += len;
    }
  }
  // The pieces back in one flat tensor shaped and placed like `like`.
  Tensor joined(const Tensor& like) const {
    Tensor flat = Tensor::empty(like.shape(), like.dtype(), like.device());
    int64_t at = 0;
    for (const Tensor& p : parts) {
      flat.narrow(at, p.numel()).copy_from(p);
      at += p.numel();
    }
    return flat;
  }
};

struct SgdVariant {
  const char* name;
  double momentum, dampening, weight_decay;
  bool nesterov;
};

// Inputs: param, grads [rows, n], and with momentum the buffer (random: the first step
// must not read it). Outputs: param, and with momentum the buffer.
OpCase sgd_case(const SgdVariant& v, int64_t n, bool list) {
  OpCase c;
  c.op = list ? "sgd_update_list" : "sgd_update";
  c.params = std::string(v.name) + " " + std::to_string(n);
  const std::string key = c.op + c.params;
  const bool with_buffer = v.momentum != 0;
  c.make_inputs = [=] {
    Tensors in{case_input(key, 0, {n}), case_input(key, 1, {gradient_rows(n), n}, -3.0f, 3.0f)};
    if (with_buffer) in.push_back(case_input(key, 2, {n}));
    return in;
  };
  c.run = [=](const Tensors& in) {
    Tensor param = in[0].clone(), buffer = with_buffer ? in[2].clone() : Tensor();
    const std::vector<int64_t> sizes = list_pieces(list ? n : 0);
    Pieces params(param, sizes), buffers = with_buffer ? Pieces(buffer, sizes) : Pieces();
    for (int k = 0; k < kSteps; ++k) {
      ops::SgdSpec s;
      s.lr = sgd_lr(k);
      s.momentum = v.momentum;
      s.dampening = v.dampening;
      s.weight_decay = v.weight_decay;
      s.nesterov = v.nesterov;
      s.first_step = k == 0;
      if (!list) {
        ops::sgd_update(param, gradient(in[1], k), buffer, s);
        continue;
      }
      const Pieces grads(gradient(in[1], k), sizes);
      std::vector<ops::SgdTensors> entries;
      for (size_t i = 0; i < sizes.size(); ++i)
        entries.push_back({&params.parts[i], &grads.parts[i], with_buffer ? &buffers.parts[i] : &buffer});
      ops::sgd_update(entries, s);
    }
    if (list) {
      param = params.joined(param);
      if (with_buffer) buffer = buffers.joined(buffer);
    }
    return with_buffer ? Tensors{param, buffer} : Tensors{param};
  };
  c.reference = [=](const Tensors& in) {
    Doubles p = values(in[0]), buf(p.size());
    const Doubles g = values(in[1]);
    for (int k = 0; k < kSteps; ++k) {
      const double* gk = g.data() + size_t(k % in[1].size(0)) * p.size();
      for (size_t i = 0; i < p.size(); ++i) {
        double d = gk[i] + v.weight_decay * p[i];
        if (v.momentum != 0) {
          buf[i] = k == 0 ? d : v.momentum * buf[i] + (1 - v.dampening) * d;
          d = v.nesterov ? d + v.momentum * buf[i] : buf[i];
        }
        p[i] -= sgd_lr(k) * d;
      }
    }
    return with_buffer ? std::vector<Doubles>{p, buf} : std::vector<Doubles>{p};
  };
  c.ref_tol = {1e-6, 1e-6};
  c.bitwise = true;
  return c;
}

struct AdamVariant {
  const char* name;
  double weight_decay;
  bool decoupled;
};

// Inputs: param, grads [rows, n], exp_avg and exp_avg_sq (zeros, as they start); steps
// t = 1, 2, 3. Outputs: param, exp_avg, exp_avg_sq.
OpCase adam_case(const AdamVariant& v, int64_t n, bool list) {
  OpCase c;
  c.op = list ? "adam_update_list" : "adam_update";
  c.params = std::string(v.name) + " " + std::to_string(n);
  const std::string key = c.op + c.params;
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  c.make_inputs = [=] {
    // |g| >= 0.1 > |wd p|: g + wd p stays away from 0, where cancellation leaves it few
    // correct digits and the update, m / sqrt(v) of such values, differs from the double
    // one by far more than rounding (one element in 2 M did so with g drawn in [-2, 2]).
    Tensor grads = case_input(key, 1, {gradient_rows(n), n}, -1.9f, 1.9f);
    for (float *g = grads.data<float>(), *end = g + grads.numel(); g != end; ++g) *g += std::copysign(0.1f, *g);
    return Tensors{case_input(key, 0, {n}), grads, Tensor::zeros({n}), Tensor::zeros({n})};
  };
  c.run = [=](const Tensors& in) {
    Tensor param = in[0].clone(), m = in[2].clone(), s = in[3].clone();
    const std::vector<int64_t> sizes = list_pieces(list ? n : 0);
    Pieces params(param, sizes), ms(m, sizes), ss(s, sizes);
    for (int t = 1; t <= kSteps; ++t) {
      ops::AdamSpec spec;
      spec.lr = lr;
      spec.beta1 = beta1;
      spec.beta2 = beta2;
      spec.eps = eps;
      spec.weight_decay = v.weight_decay;
      spec.decoupled = v.decoupled;
      spec.bias_correction1 = ops::adam_bias_correction(beta1, t);
      spec.bias_correction2 = ops::adam_bias_correction(beta2, t);
      if (!list) {
        ops::adam_update(param, gradient(in[1], t - 1), m, s, spec);
        continue;
      }
      const Pieces grads(gradient(in[1], t - 1), sizes);
      std::vector<ops::AdamTensors> entries;
      for (size_t i = 0; i < sizes.size(); ++i)
        entries.push_back({&params.parts[i], &grads.parts[i], &ms.parts[i], &ss.parts[i]});
      ops::adam_update(entries, spec);
    }
    if (list) return Tensors{params.joined(param), ms.joined(m), ss.joined(s)};
    return Tensors{param, m, s};
  };
  c.reference = [=](const Tensors& in) {
    Doubles p = values(in[0]), m = values(in[2]), s = values(in[3]);
    const Doubles g = values(in[1]);
    for (int t = 1; t <= kSteps; ++t) {
      const double* gt = g.data() + size_t((t - 1) % in[1].size(0)) * p.size();
      const double bias_correction1 = 1 - std::pow(beta1, t), bias_correction2 = 1 - std::pow(beta2, t);
      for (size_t i = 0; i < p.size(); ++i) {
        double gi = gt[i];
        if (v.decoupled)
          p[i] *= 1 - lr * v.weight_decay;
        else
          gi += v.weight_decay * p[i];
        m[i] = beta1 * m[i] + (1 - beta1) * gi;
        s[i] = beta2 * s[i] + (1 - beta2) * gi * gi;
        const double m_hat = m[i] / bias_correction1, s_hat = s[i] / bias_correction2;
        p[i] -= lr * m_hat / (std::sqrt(s_hat) + eps);
      }
    }
    return std::vector<Doubles>{p, m, s};
  };
  c.ref_tol = {1e-6, 1e-6};
  c.bitwise = true;
  return c;
}

}  // namespace

void add_optim_cases(OpCases& cases) {
  const SgdVariant sgd[] = {{"momentum 0", 0, 0, 0, false},
                            {"momentum 0 weight decay", 0, 0, 0.01, false},
                            {"momentum 0.9 weight decay", 0.9, 0, 0.01, false},
                            {"momentum 0.9 dampening 0.3 weight decay", 0.9, 0.3, 0.01, false},
                            {"nesterov 0.9 weight decay", 0.9, 0, 0.01, true}};
  const AdamVariant adam[] = {
      {"adam", 0, false}, {"adam weight decay 0.05", 0.05, false}, {"adamw weight decay 0.05", 0.05, true}};
  for (int64_t n : kSizes)
    for (bool list : {false, true}) {
      for (const SgdVariant& v : sgd) cases.push_back(sgd_case(v, n, list));
      for (const AdamVariant& v : adam) cases.push_back(adam_case(v, n, list));
    }
}

}  // namespace gridnn::test
