// The fused optimizer updates (kernels/optim.h) and the optimizers over them on cuda:0
// against the CPU backend (label gpu: skipped without a CUDA device). Both backends run
// the same element bodies without FMA contraction, so every result must agree bit for bit.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/optim.h"
#include "models/optim/optimizer.h"
#include "test/models/optim/adam_step.h"
#include "test/support/gpu_test.h"
#include "test/support/random_tensor.h"

namespace gridnn::test {
namespace {

using GpuOptim = GpuTest;

// Large enough that the grid-stride loops wrap (more elements than threads in the grid).
constexpr int64_t kLarge = (int64_t(1) << 21) + 7;

TEST_F(GpuOptim, SgdUpdateMatchesCpuBitwise) {
  for (int64_t n : {int64_t(1001), kLarge})
    for (int variant = 0; variant < 4; ++variant) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", variant " + std::to_string(variant));
      ops::SgdSpec s;
      s.lr = 0.03;
      s.momentum = variant == 0 ? 0.0 : 0.9;
      s.dampening = variant == 2 ? 0.3 : 0.0;
      s.weight_decay = variant >= 1 ? 0.01 : 0.0;
      s.nesterov = variant == 3;
      Tensor p = random_tensor({n}, 1), g = random_tensor({n}, 2, -3, 3), buf = random_tensor({n}, 3);
      Tensor gp = on_gpu(p), gg = on_gpu(g), gbuf = on_gpu(buf);
      for (bool first : {true, false}) {
        s.first_step = first;
        ops::sgd_update(p, g, buf, s);
        ops::sgd_update(gp, gg, gbuf, s);
        EXPECT_TRUE(tensors_equal(gp, p)) << "param, first step " << first;
        if (s.momentum != 0.0) {
          EXPECT_TRUE(tensors_equal(gbuf, buf)) << "buffer, first step " << first;
        }
      }
    }
}

TEST_F(GpuOptim, AdamUpdateMatchesCpuBitwise) {
  for (int64_t n : {int64_t(1001), kLarge})
    for (bool decoupled : {false, true}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (decoupled ? ", AdamW" : ", Adam"));
      Tensor p = random_tensor({n}, 4), m = Tensor::zeros({n}), v = Tensor::zeros({n});
      Tensor gp = on_gpu(p), gm = on_gpu(m), gv = on_gpu(v);
      for (int t = 1; t <= 3; ++t) {
        Tensor g = random_tensor({n}, 10 + uint64_t(t), -2, 2);
        const ops::AdamSpec s = test::adam_step_spec(decoupled, t);
        ops::adam_update(p, g, m, v, s);
        ops::adam_update(gp, on_gpu(g), gm, gv, s);
        EXPECT_TRUE(tensors_equal(gp, p)) << "param, step " << t;
        EXPECT_TRUE(tensors_equal(gm, m)) << "exp_avg, step " << t;
        EXPECT_TRUE(tensors_equal(gv, v)) << "exp_avg_sq, step " << t;
      }
    }
}

// The optimizers create their buffers on the parameters' device; a state saved on the
// host loads onto the GPU.
TEST_F(GpuOptim, OptimizersMatchCpuAndKeepStateOnTheDevice) {
  for (const optim::OptimizerKind kind :
       {optim::OptimizerKind::sgd, optim::OptimizerKind::adam, optim::OptimizerKind::adamw}) {
    SCOPED_TRACE(enum_name(kind));
    optim::OptimizerOptions o;
    o.kind = kind;
    o.momentum = kind == optim::OptimizerKind::sgd ? 0.9 : 0.0;
    nn::Parameter cpu{random_tensor({3, 5, 7}, 5), Tensor::zeros({3, 5, 7})};
    nn::Parameter gpu_param{on_gpu(cpu.value), Tensor::zeros({3, 5, 7}, DType::f32, gpu())};
    auto on_cpu = optim::make_optimizer(o, {{"w", &cpu}});
    auto on_device = optim::make_optimizer(o, {{"w", &gpu_param}});
    for (int k = 0; k < 3; ++k) {
      Tensor g = random_tensor({3, 5, 7}, 20 + uint64_t(k));
      cpu.grad.copy_from(g);
      gpu_param.grad.copy_from(g);
      on_cpu->step(0.1);
      on_device->step(0.1);
    }
    EXPECT_TRUE(tensors_equal(gpu_param.value, cpu.value));
    std::map<std::string, Tensor> host_state;
    for (const auto& [name, t] : on_device->state()) {
      EXPECT_TRUE(t.device() == gpu()) << name;
      host_state[name] = t.to_host();
    }
    on_device->load_state(host_state, 3);
    for (const auto& [name, t] : on_device->state()) EXPECT_TRUE(t.device() == gpu()) << name;
  }
}

}  // namespace
}  // namespace gridnn::test
