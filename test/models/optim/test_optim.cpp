// Optimizers (models/optim/sgd.h, adam.h, kernels/optim.h) and schedules (schedule.h):
//   - several steps of each optimizer against a plain double-precision loop written here
//     from PyTorch's formulas;
//   - three steps against PyTorch 1.13 itself (test/parity/make_optim_fixtures.py);
//   - state() / load_state(): through a safetensors file into a fresh optimizer, the run
//     continues bit for bit as if uninterrupted; load errors list every bad name;
//   - the options' checks; every schedule against its closed form at the edges.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "kernels/optim.h"
#include "models/optim/adam.h"
#include "models/optim/optimizer.h"
#include "models/optim/schedule.h"
#include "models/optim/sgd.h"
#include "test/models/optim/adam_step.h"
#include "test/support/error_message.h"
#include "test/support/parity_fixture.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

// The gridnn::Error that calling F throws contains NEEDLE.
#define EXPECT_ERROR_SAYS(F, NEEDLE) EXPECT_PRED_FORMAT2(::testing::IsSubstring, NEEDLE, error_message(F))

namespace gridnn::test {
namespace {

using optim::OptimizerKind;
using optim::OptimizerOptions;
using optim::ScheduleKind;

// ---- a small set of parameters and their per-step gradients ------------------------------

const std::vector<std::pair<std::string, Shape>> kShapes = {
    {"conv.weight", {4, 3, 2, 2, 2}}, {"conv.bias", {4}}, {"fc.weight", {3, 7}}};

// Owns the parameters an optimizer points at.
struct Params {
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  optim::ParameterList list;

  explicit Params(uint64_t seed) {
    for (size_t i = 0; i < kShapes.size(); ++i) {
      auto p = std::make_unique<nn::Parameter>();
      p->value = random_tensor(kShapes[i].second, seed + i);
      p->grad = Tensor::zeros(kShapes[i].second);
      list.emplace_back(kShapes[i].first, p.get());
      owned.push_back(std::move(p));
    }
  }
  // Same values, own storage.
  Params(const Params& other) : Params(0) {
    for (size_t i = 0; i < owned.size(); ++i) owned[i]->value.copy_from(other.owned[i]->value);
  }
  nn::Parameter& operator[](size_t i) { return *owned[i]; }
  size_t size() const { return owned.size(); }
};

// The gradient of parameter i at step k: a fresh draw, growing in size over the steps.
Tensor gradient(size_t i, int k) {
  return random_tensor(kShapes[i].second, 1000 + 17 * uint64_t(k) + i, -0.5f * (k + 1), 0.5f * (k + 1));
}
double lr_at(int k) { return 0.1 / (1 + k); }

void set_grads(Params& params, int k) {
  for (size_t i = 0; i < params.size(); ++i) params[i].grad.copy_from(gradient(i, k));
}

std::vector<double> doubles(const Tensor& t) { return to_doubles(t); }
Tensor as_f32(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

// ---- double-precision references, straight from torch/optim/sgd.py and adam(w).py ---------

struct Reference {
  std::vector<double> p, buf, m, v;
  bool has_buf = false;
};

void reference_sgd(Reference& r, const std::vector<double>& g, const OptimizerOptions& o, double lr) {
  const double wd = o.weight_decay < 0 ? 0.0 : o.weight_decay;
  if (!r.has_buf) r.buf.assign(r.p.size(), 0.0);
  for (size_t i = 0; i < r.p.size(); ++i) {
    double d = g[i] + wd * r.p[i];
    if (o.momentum != 0) {
      r.buf[i] = r.has_buf ? o.momentum * r.buf[i] + (1 - o.dampening) * d : d;
      d = o.nesterov ? d + o.momentum * r.buf[i] : r.buf[i];
    }
    r.p[i] -= lr * d;
  }
  r.has_buf = true;
}

void reference_adam(Reference& r, const std::vector<double>& g, const OptimizerOptions& o, double lr, int t) {
  const bool decoupled = o.kind == OptimizerKind::adamw;
  const double wd = o.weight_decay >= 0 ? o.weight_decay : decoupled ? 1e-2 : 0.0;
  if (r.m.empty()) r.m.assign(r.p.size(), 0.0), r.v.assign(r.p.size(), 0.0);
  for (size_t i = 0; i < r.p.size(); ++i) {
    double gi = g[i];
    if (decoupled)
      r.p[i] *= 1 - lr * wd;
    else
      gi += wd * r.p[i];
    r.m[i] = o.beta1 * r.m[i] + (1 - o.beta1) * gi;
    r.v[i] = o.beta2 * r.v[i] + (1 - o.beta2) * gi * gi;
    const double m_hat = r.m[i] / (1 - std::pow(o.beta1, t));
    const double v_hat = r.v[i] / (1 - std::pow(o.beta2, t));
    r.p[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
  }
}

// Runs `steps` steps of the optimizer and of the reference; compares every step.
void expect_matches_reference(const OptimizerOptions& o, int steps) {
  Params params(7);
  std::vector<Reference> refs(params.size());
  for (size_t i = 0; i < params.size(); ++i) refs[i].p = doubles(params[i].value);
  auto opt = optim::make_optimizer(o, params.list);
  for (int k = 0; k < steps; ++k) {
    set_grads(params, k);
    opt->step(lr_at(k));
    for (size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE(kShapes[i].first + " after step " + std::to_string(k));
      if (o.kind == OptimizerKind::sgd)
        reference_sgd(refs[i], doubles(gradient(i, k)), o, lr_at(k));
      else
        reference_adam(refs[i], doubles(gradient(i, k)), o, lr_at(k), k + 1);
      Tensor expected = as_f32(refs[i].p, kShapes[i].second);
      EXPECT_LE(max_relative_error(params[i].value, expected), 2e-6);
      // Parameters must move: a no-op optimizer would otherwise pass on tiny steps.
      EXPECT_GT(max_relative_error(params[i].value, as_f32(doubles(gradient(i, 99)), kShapes[i].second)), 0.1);
    }
  }
  EXPECT_EQ(opt->steps(), steps);
}

OptimizerOptions sgd(double momentum = 0, double dampening = 0, bool nesterov = false, double wd = -1) {
  OptimizerOptions o;
  o.kind = OptimizerKind::sgd;
  o.momentum = momentum;
  o.dampening = dampening;
  o.nesterov = nesterov;
  o.weight_decay = wd;
  return o;
}
OptimizerOptions adam(OptimizerKind kind, double wd = -1, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8) {
  OptimizerOptions o;
  o.kind = kind;
  o.weight_decay = wd;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  return o;
}

TEST(Sgd, PlainMatchesReference) { expect_matches_reference(sgd(), 5); }
TEST(Sgd, MomentumMatchesReference) { expect_matches_reference(sgd(0.9), 5); }
TEST(Sgd, MomentumDampeningWeightDecayMatchesReference) { expect_matches_reference(sgd(0.8, 0.3, false, 0.05), 5); }
TEST(Sgd, NesterovWeightDecayMatchesReference) { expect_matches_reference(sgd(0.9, 0, true, 0.01), 5); }
TEST(Adam, WithWeightDecayMatchesReference) { expect_matches_reference(adam(OptimizerKind::adam, 0.05), 5); }
TEST(Adam, DefaultsMatchReference) { expect_matches_reference(adam(OptimizerKind::adam), 5); }
TEST(AdamW, DefaultsMatchReference) { expect_matches_reference(adam(OptimizerKind::adamw), 5); }
TEST(AdamW, CustomBetasMatchReference) {
  expect_matches_reference(adam(OptimizerKind::adamw, 0.1, 0.8, 0.99, 1e-6), 5);
}

TEST(Optimizer, WeightDecayDefaultsByKind) {
  Params params(1);
  EXPECT_EQ(optim::make_optimizer(sgd(), params.list)->options().weight_decay, 0.0);
  EXPECT_EQ(optim::make_optimizer(adam(OptimizerKind::adam), params.list)->options().weight_decay, 0.0);
  EXPECT_EQ(optim::make_optimizer(adam(OptimizerKind::adamw), params.list)->options().weight_decay, 1e-2);
  EXPECT_EQ(optim::make_optimizer(adam(OptimizerKind::adamw, 0.0), params.list)->options().weight_decay, 0.0);
}

TEST(Optimizer, ParameterWithoutGradIsSkipped) {
  for (const OptimizerOptions& o : {sgd(0.9), adam(OptimizerKind::adamw)}) {
    SCOPED_TRACE(enum_name(o.kind));
    Params params(3);
    auto opt = optim::make_optimizer(o, params.list);
    set_grads(params, 0);
    params[1].grad = Tensor();
    const Tensor before = params[1].value.clone();
    opt->step(0.1);
    EXPECT_TRUE(tensors_equal(params[1].value, before));
    for (const auto& [name, t] : opt->state()) EXPECT_EQ(name.find("conv.bias"), std::string::npos) << name;
    EXPECT_EQ(opt->steps(), 1);
  }
}

// ---- the fused kernels' own checks ---------------------------------------------------------

TEST(OptimKernels, SgdFirstStepIgnoresTheOldBuffer) {
  Tensor p = Tensor::from_vector<float>({1.0f, -2.0f}, {2});
  Tensor g = Tensor::from_vector<float>({0.5f, 0.25f}, {2});
  Tensor buf = Tensor::from_vector<float>({NAN, 1e30f}, {2});  // garbage a fresh buffer might hold
  ops::SgdSpec s;
  s.lr = 0.5;
  s.momentum = 0.9;
  s.first_step = true;
  ops::sgd_update(p, g, buf, s);
  EXPECT_EQ(buf.to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.75f, -2.125f}));
  s.first_step = false;  // buf = 0.9 * buf + g; p -= 0.5 * buf
  ops::sgd_update(p, g, buf, s);
  EXPECT_EQ(buf.to_vector<float>(), (std::vector<float>{0.9f * 0.5f + 0.5f, 0.9f * 0.25f + 0.25f}));
}

TEST(OptimKernels, ChecksSayWhatToChange) {
  Tensor p = Tensor::zeros({3}), g = Tensor::zeros({3}), m = Tensor::zeros({3}), v = Tensor::zeros({3});
  Tensor none;
  ops::SgdSpec s;
  s.lr = 0.1;
  s.momentum = 0.9;
  EXPECT_ERROR_SAYS([&] { ops::sgd_update(p, g, none, s); }, "'momentum_buffer' is undefined");
  Tensor g4 = Tensor::zeros({4});
  EXPECT_ERROR_SAYS([&] { ops::sgd_update(p, g4, m, s); },
                    "'grad' is f32[4] on cpu but the parameter is f32[3] on cpu");
  EXPECT_ERROR_SAYS([&] { ops::sgd_update(p, g, p, s); }, "'param' and 'momentum_buffer' share memory");
  Tensor h = Tensor::zeros({3}, DType::bf16);
  EXPECT_ERROR_SAYS([&] { ops::sgd_update(p, h, m, s); }, "'grad' must be f32");
  s.momentum = 0;
  s.nesterov = true;
  EXPECT_ERROR_SAYS([&] { ops::sgd_update(p, g, none, s); }, "nesterov needs momentum > 0");
  ops::AdamSpec a;
  EXPECT_ERROR_SAYS([&] { ops::adam_update(p, g, m, m, a); }, "'exp_avg' and 'exp_avg_sq' share memory");
  a.bias_correction1 = 0;
  EXPECT_ERROR_SAYS([&] { ops::adam_update(p, g, m, v, a); }, "bias corrections must be > 0");
}

// The list forms (one parallel pass over all the parameters) against the one-parameter
// calls: bit for bit, on sizes around the chunk (16384) and the serial threshold, for SGD
// (first and later steps) and Adam and AdamW over three steps; and the same checks.
TEST(OptimKernels, TheListFormIsEachParameterAloneBitForBit) {
  const std::vector<int64_t> sizes = {0, 1, 7, 16383, 16384, 16385, 50001, 131072};
  auto draw = [&](uint64_t seed, float lo = -1.0f) {
    std::vector<Tensor> out;
    for (size_t i = 0; i < sizes.size(); ++i) out.push_back(random_tensor({sizes[i]}, seed * 100 + i, lo));
    return out;
  };
  auto clones = [](const std::vector<Tensor>& v) {
    std::vector<Tensor> out;
    for (const Tensor& t : v) out.push_back(t.clone());
    return out;
  };
  const std::vector<Tensor> params = draw(1), grads = draw(2), buffers = draw(3), squares = draw(4, 0.0f);
  ops::SgdSpec sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  sgd.nesterov = true;
  std::vector<Tensor> p1 = clones(params), b1 = clones(buffers), p2 = clones(params), b2 = clones(buffers);
  for (int step = 0; step < 3; ++step) {
    sgd.first_step = step == 0;
    std::vector<ops::SgdTensors> list;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ops::sgd_update(p1[i], grads[i], b1[i], sgd);
      list.push_back({&p2[i], &grads[i], &b2[i]});
    }
    ops::sgd_update(list, sgd);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(tensors_equal(p1[i], p2[i])) << "SGD parameter of " << sizes[i];
    EXPECT_TRUE(tensors_equal(b1[i], b2[i])) << "SGD momentum of " << sizes[i];
  }
  for (bool decoupled : {false, true}) {
    std::vector<Tensor> q1 = clones(params), m1 = clones(buffers), v1 = clones(squares);
    std::vector<Tensor> q2 = clones(params), m2 = clones(buffers), v2 = clones(squares);
    for (int step = 1; step <= 3; ++step) {
      const ops::AdamSpec adam = test::adam_step_spec(decoupled, step);
      std::vector<ops::AdamTensors> list;
      for (size_t i = 0; i < sizes.size(); ++i) {
        ops::adam_update(q1[i], grads[i], m1[i], v1[i], adam);
        list.push_back({&q2[i], &grads[i], &m2[i], &v2[i]});
      }
      ops::adam_update(list, adam);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(tensors_equal(q1[i], q2[i])) << (decoupled ? "AdamW" : "Adam") << " parameter of " << sizes[i];
      EXPECT_TRUE(tensors_equal(m1[i], m2[i]) && tensors_equal(v1[i], v2[i])) << "moments of " << sizes[i];
    }
  }
  Tensor p = Tensor::zeros({3}), g4 = Tensor::zeros({4}), m = Tensor::zeros({3});
  EXPECT_ERROR_SAYS(
      [&] {
        ops::sgd_update(std::vector<ops::SgdTensors>{{&p, &g4, &m}}, sgd);
      },
      "'grad' is f32[4] on cpu but the parameter is f32[3] on cpu");
}

// ---- PyTorch parity (test/parity/make_optim_fixtures.py) -----------------------------------

const SafetensorsFile& fixtures() { return test::parity_fixtures("optim.safetensors"); }
Tensor fixture(const std::string& name) { return test::parity_fixture("optim.safetensors", name); }

struct ParityCase {
  std::string name;
  OptimizerOptions options;
  std::string torch_options;  // the fixture's metadata for the case: the two must agree
};

void expect_parity(const ParityCase& c) {
  const std::vector<std::string> names = {"conv.weight", "conv.bias", "fc.weight"};
  const std::vector<double> lrs = {0.1, 0.05, 0.02};
  ASSERT_EQ(fixtures().metadata.at("lrs"), "[0.1, 0.05, 0.02]");
  ASSERT_EQ(fixtures().metadata.at(c.name), c.torch_options);
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  optim::ParameterList list;
  for (const std::string& n : names) {
    auto p = std::make_unique<nn::Parameter>();
    p->value = fixture("param." + n).clone();
    list.emplace_back(n, p.get());
    owned.push_back(std::move(p));
  }
  auto opt = optim::make_optimizer(c.options, list);
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < names.size(); ++i) owned[i]->grad = fixture("grad." + std::to_string(k) + "." + names[i]);
    opt->step(lrs[size_t(k)]);
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string key = c.name + ".step" + std::to_string(k) + "." + names[i];
      EXPECT_LE(max_relative_error(owned[i]->value, fixture(key)), 1e-6) << key;
    }
  }
}

TEST(OptimParity, SgdPlain) { expect_parity({"sgd_plain", sgd(), "{\"kind\": \"SGD\"}"}); }
TEST(OptimParity, SgdNesterovWeightDecay) {
  expect_parity({"sgd_nesterov_wd", sgd(0.9, 0, true, 0.01),
                 "{\"kind\": \"SGD\", \"momentum\": 0.9, \"nesterov\": true, \"weight_decay\": 0.01}"});
}
TEST(OptimParity, SgdDampening) {
  expect_parity({"sgd_dampening", sgd(0.8, 0.3), "{\"kind\": \"SGD\", \"momentum\": 0.8, \"dampening\": 0.3}"});
}
TEST(OptimParity, AdamWeightDecay) {
  expect_parity({"adam_wd", adam(OptimizerKind::adam, 0.05), "{\"kind\": \"Adam\", \"weight_decay\": 0.05}"});
}
TEST(OptimParity, AdamWDefaults) {
  expect_parity({"adamw_default", adam(OptimizerKind::adamw), "{\"kind\": \"AdamW\"}"});
}
TEST(OptimParity, AdamWWeightDecay) {
  expect_parity({"adamw_wd", adam(OptimizerKind::adamw, 0.1, 0.8, 0.99, 1e-6),
                 "{\"kind\": \"AdamW\", \"betas\": [0.8, 0.99], \"eps\": 1e-06, \"weight_decay\": 0.1}"});
}

// ---- state() / load_state() ----------------------------------------------------------------

std::vector<std::string> state_names(const optim::Optimizer& opt) {
  std::vector<std::string> names;
  for (const auto& [name, t] : opt.state()) names.push_back(name);
  return names;
}

TEST(OptimState, NamesFollowTheParameters) {
  Params params(2);
  auto plain = optim::make_optimizer(sgd(), params.list);
  auto momentum = optim::make_optimizer(sgd(0.9), params.list);
  auto adamw = optim::make_optimizer(adam(OptimizerKind::adamw), params.list);
  EXPECT_TRUE(state_names(*momentum).empty()) << "no buffer before the first step";
  EXPECT_TRUE(state_names(*adamw).empty()) << "no moments before the first step";
  set_grads(params, 0);
  plain->step(0.1);
  momentum->step(0.1);
  adamw->step(0.1);
  EXPECT_TRUE(state_names(*plain).empty()) << "plain SGD keeps no state";
  EXPECT_EQ(state_names(*momentum),
            (std::vector<std::string>{"conv.weight.momentum_buffer", "conv.bias.momentum_buffer",
                                      "fc.weight.momentum_buffer"}));
  EXPECT_EQ(state_names(*adamw),
            (std::vector<std::string>{"conv.weight.exp_avg", "conv.weight.exp_avg_sq", "conv.bias.exp_avg",
                                      "conv.bias.exp_avg_sq", "fc.weight.exp_avg", "fc.weight.exp_avg_sq"}));
  const NamedTensors moments = adamw->state();
  for (size_t i = 0; i < moments.size(); ++i) {
    EXPECT_EQ(moments[i].second.shape(), params[i / 2].value.shape()) << moments[i].first;
    EXPECT_EQ(moments[i].second.dtype(), DType::f32) << moments[i].first;
  }
}

Tensor state_entry(const optim::Optimizer& opt, const std::string& name) {
  for (const auto& [n, t] : opt.state())
    if (n == name) return t;
  throw Error("no state entry " + name);
}

// Saves after 3 steps through a safetensors file, restores into a fresh optimizer over a
// copy of the parameters, runs 3 more steps: everything equals an uninterrupted 6-step run.
void expect_resume_is_exact(const OptimizerOptions& o) {
  Params straight(5), interrupted(5);
  auto a = optim::make_optimizer(o, straight.list);
  auto b = optim::make_optimizer(o, interrupted.list);
  for (int k = 0; k < 3; ++k) {
    set_grads(straight, k), a->step(lr_at(k));
    set_grads(interrupted, k), b->step(lr_at(k));
  }
  const SafetensorsFile file = [&] {
    const std::string bytes = serialize_safetensors(b->state());
    return parse_safetensors(bytes.data(), bytes.size(), "optimizer state");
  }();
  b.reset();
  Params resumed(interrupted);
  auto c = optim::make_optimizer(o, resumed.list);
  c->load_state(file.tensors, 3);
  EXPECT_EQ(c->steps(), 3);
  for (int k = 3; k < 6; ++k) {
    set_grads(straight, k), a->step(lr_at(k));
    set_grads(resumed, k), c->step(lr_at(k));
  }
  for (size_t i = 0; i < straight.size(); ++i)
    EXPECT_TRUE(tensors_equal(resumed[i].value, straight[i].value)) << kShapes[i].first;
  const NamedTensors sa = a->state(), sc = c->state();
  ASSERT_EQ(sa.size(), sc.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sc[i].first, sa[i].first);
    EXPECT_TRUE(tensors_equal(sc[i].second, sa[i].second)) << sa[i].first;
  }
}

TEST(OptimState, SgdMomentumResumesExactly) { expect_resume_is_exact(sgd(0.9, 0.1, false, 0.01)); }
TEST(OptimState, SgdNesterovResumesExactly) { expect_resume_is_exact(sgd(0.9, 0, true)); }
TEST(OptimState, AdamResumesExactly) { expect_resume_is_exact(adam(OptimizerKind::adam, 0.01)); }
TEST(OptimState, AdamWResumesExactly) { expect_resume_is_exact(adam(OptimizerKind::adamw)); }

TEST(OptimState, LoadCopiesTheTensors) {
  Params params(4);
  auto opt = optim::make_optimizer(sgd(0.9), params.list);
  set_grads(params, 0);
  opt->step(0.1);
  std::map<std::string, Tensor> saved;
  for (const auto& [name, t] : opt->state()) saved[name] = t.clone();
  const Tensor expected = saved.at("conv.bias.momentum_buffer").clone();
  opt->load_state(saved, 1);
  saved.at("conv.bias.momentum_buffer").copy_from(Tensor::zeros({4}));
  EXPECT_TRUE(tensors_equal(state_entry(*opt, "conv.bias.momentum_buffer"), expected));
}

TEST(OptimState, LoadListsEveryBadEntryAndChangesNothing) {
  Params params(4);
  auto opt = optim::make_optimizer(adam(OptimizerKind::adam), params.list);
  set_grads(params, 0);
  opt->step(0.1);
  std::map<std::string, Tensor> good;
  for (const auto& [name, t] : opt->state()) good[name] = t.clone();

  std::map<std::string, Tensor> bad = good;
  bad.erase("conv.bias.exp_avg");
  bad.erase("fc.weight.exp_avg_sq");
  bad["conv.bias.momentum_buffer"] = Tensor::zeros({4});
  bad["conv.weight.exp_avg"] = Tensor::zeros({4, 3});
  const std::string msg = error_message([&] { opt->load_state(bad, 1); });
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "Adam load_state", msg);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "2 missing: conv.bias.exp_avg, fc.weight.exp_avg_sq", msg);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "1 unexpected: conv.bias.momentum_buffer", msg);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                      "1 mis-shaped: conv.weight.exp_avg is f32[4, 3] on cpu, expected f32[4, 3, 2, 2, 2]", msg);
  EXPECT_EQ(opt->steps(), 1);
  for (const auto& [name, t] : opt->state()) EXPECT_TRUE(tensors_equal(t, good.at(name))) << name;

  EXPECT_ERROR_SAYS([&] { opt->load_state(good, 0); }, "before any update: no buffers exist yet); 6 unexpected");
  EXPECT_ERROR_SAYS([&] { opt->load_state({}, -1); }, "steps must be >= 0");
  opt->load_state({}, 0);  // back to a fresh optimizer
  EXPECT_TRUE(opt->state().empty());
  EXPECT_EQ(opt->steps(), 0);
}

// ---- the options' checks --------------------------------------------------------------------

TEST(Optimizer, ChecksSayWhatToChange) {
  Params params(1);
  auto make = [&](const OptimizerOptions& o) { return [&params, o] { optim::make_optimizer(o, params.list); }; };
  EXPECT_ERROR_SAYS(make(sgd(0, 0, true)),
                    "SGD: nesterov needs momentum > 0 and dampening 0, got momentum 0 and dampening 0");
  EXPECT_ERROR_SAYS(make(sgd(0.9, 0.1, true)), "nesterov needs momentum > 0 and dampening 0");
  EXPECT_ERROR_SAYS(make(sgd(-0.5)), "SGD: momentum must be >= 0, got -0.5");
  EXPECT_ERROR_SAYS(make(sgd(0.9, 1.5)), "SGD: dampening must be in [0, 1], got 1.5");
  EXPECT_ERROR_SAYS(make(adam(OptimizerKind::adam, -1, 1.0)), "Adam: beta1 must be in [0, 1), got 1");
  EXPECT_ERROR_SAYS(make(adam(OptimizerKind::adamw, -1, 0.9, -0.1)), "AdamW: beta2 must be in [0, 1)");
  EXPECT_ERROR_SAYS(make(adam(OptimizerKind::adam, -1, 0.9, 0.999, -1e-8)), "Adam: eps must be finite and >= 0");
  EXPECT_ERROR_SAYS([] { parse_enum<OptimizerKind>("rmsprop"); },
                    "unknown optimizer \"rmsprop\"; use sgd, adam or adamw");

  EXPECT_ERROR_SAYS([] { optim::make_optimizer(sgd(), {}); }, "no parameters to optimize");
  optim::ParameterList twice = {params.list[0], params.list[0]};
  EXPECT_ERROR_SAYS([&] { optim::make_optimizer(sgd(), twice); }, "parameter name 'conv.weight' appears twice");
  nn::Parameter half{Tensor::zeros({2}, DType::bf16), Tensor::zeros({2}, DType::bf16)};
  EXPECT_ERROR_SAYS([&] { optim::make_optimizer(sgd(), {{"h", &half}}); }, "update f32 (master) weights only");

  auto opt = optim::make_optimizer(adam(OptimizerKind::adamw), params.list);
  EXPECT_ERROR_SAYS([&] { opt->step(-0.1); }, "AdamW: the learning rate must be finite and >= 0");
  EXPECT_ERROR_SAYS([&] { opt->step(NAN); }, "check the schedule");
  EXPECT_EQ(opt->steps(), 0);
}

// ---- schedules ------------------------------------------------------------------------------

optim::ScheduleOptions schedule(ScheduleKind kind, double base_lr, int64_t warmup = 0) {
  optim::ScheduleOptions o;
  o.kind = kind;
  o.base_lr = base_lr;
  o.warmup_steps = warmup;
  return o;
}

TEST(Schedule, Constant) {
  const optim::LrSchedule s(schedule(ScheduleKind::constant, 0.25));
  for (int64_t step : {0, 1, 999, 1000000}) EXPECT_EQ(s.lr(step), 0.25) << step;
}

TEST(Schedule, WarmupIsLinearUpToTheBaseRate) {
  const optim::LrSchedule s(schedule(ScheduleKind::constant, 0.4, 4));
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(1), 0.2);
  EXPECT_DOUBLE_EQ(s.lr(3), 0.4);  // the last warm-up step reaches base_lr
  EXPECT_DOUBLE_EQ(s.lr(4), 0.4);
}

TEST(Schedule, StepDecaysEveryStepSize) {
  optim::ScheduleOptions o = schedule(ScheduleKind::step, 1.0, 2);
  o.step_size = 3;
  o.gamma = 0.5;
  const optim::LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.5);  // warm-up
  EXPECT_DOUBLE_EQ(s.lr(2), 1.0);  // s = 0
  EXPECT_DOUBLE_EQ(s.lr(4), 1.0);  // s = 2, the last before the first decay
  EXPECT_DOUBLE_EQ(s.lr(5), 0.5);  // s = 3
  EXPECT_DOUBLE_EQ(s.lr(8), 0.25);
  EXPECT_DOUBLE_EQ(s.lr(2 + 30), 1.0 / 1024);
}

TEST(Schedule, CosineFromBaseToMinimum) {
  optim::ScheduleOptions o = schedule(ScheduleKind::cosine, 0.1, 10);
  o.total_steps = 110;  // 100 cosine steps
  o.min_lr = 0.001;
  const optim::LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.01);
  EXPECT_DOUBLE_EQ(s.lr(9), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(10), 0.1);                                       // cos 0
  EXPECT_DOUBLE_EQ(s.lr(35), 0.001 + 0.099 * (1 + std::sqrt(0.5)) / 2);  // cos(pi / 4)
  EXPECT_DOUBLE_EQ(s.lr(60), 0.0505);                                    // cos(pi / 2)
  EXPECT_DOUBLE_EQ(s.lr(85), 0.001 + 0.099 * (1 - std::sqrt(0.5)) / 2);  // cos(3 pi / 4)
  EXPECT_GT(s.lr(109), 0.001);                                           // the last step
  EXPECT_LT(s.lr(109), 0.001 + 0.099 * 0.001);
  EXPECT_DOUBLE_EQ(s.lr(110), 0.001);   // cos(pi)
  EXPECT_DOUBLE_EQ(s.lr(5000), 0.001);  // past the end: stays
}

TEST(Schedule, CosineWithoutWarmupStartsAtBase) {
  optim::ScheduleOptions o = schedule(ScheduleKind::cosine, 2.0);
  o.total_steps = 4;
  const optim::LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr(0), 2.0);
  EXPECT_DOUBLE_EQ(s.lr(2), 1.0);
  EXPECT_NEAR(s.lr(4), 0.0, 1e-15);
}

TEST(Schedule, ChecksSayWhatToChange) {
  auto make = [](optim::ScheduleOptions o) { return [o] { optim::LrSchedule s(o); }; };
  EXPECT_ERROR_SAYS([] { parse_enum<ScheduleKind>("linear"); },
                    "unknown schedule \"linear\"; use constant, step or cosine");
  EXPECT_ERROR_SAYS(make(schedule(ScheduleKind::constant, -0.1)), "base_lr must be finite and >= 0");
  EXPECT_ERROR_SAYS(make(schedule(ScheduleKind::constant, 0.1, -1)), "warmup_steps must be >= 0");
  optim::ScheduleOptions step = schedule(ScheduleKind::step, 0.1);
  step.step_size = 0;
  EXPECT_ERROR_SAYS(make(step), "step_size must be > 0");
  optim::ScheduleOptions cosine = schedule(ScheduleKind::cosine, 0.1, 10);
  cosine.total_steps = 10;
  EXPECT_ERROR_SAYS(make(cosine), "cosine needs total_steps (the run's length, 10) > warmup_steps (10)");
  cosine.total_steps = 100;
  cosine.min_lr = 0.2;
  EXPECT_ERROR_SAYS(make(cosine), "min_lr must be in [0, base_lr = 0.1], got 0.2");
  const optim::LrSchedule ok(schedule(ScheduleKind::constant, 0.1));
  EXPECT_ERROR_SAYS([&] { ok.lr(-1); }, "step must be >= 0, got -1");
}

}  // namespace
}  // namespace gridnn::test
