// gridnn-demo: trains a two-layer ReLU network to imitate a random "teacher" network of
// the same shape, using only engine ops (Philox init, GEMM, ReLU forward/backward,
// reductions, axpy), then saves the weights as safetensors and reads them back.
//
//   gridnn-demo [--device cpu|cuda] [--steps 2000] [--batch 256] [--hidden 64] [--out demo.safetensors]
//
// The loss printed every --log-every steps falls from about 18 to about 0.4; the last line is
// one JSON object with the final numbers.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/philox.h"
#include "core/safetensors.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"
#include "kernels/reduce.h"

namespace {
using namespace gridnn;

struct Config {
  std::string device = "cpu";
  int steps = 2000;
  int64_t batch = 256, inputs = 32, hidden = 64, outputs = 8;
  float lr = 0.05f;
  uint64_t seed = 1;
  int log_every = 200;
  std::string out = "gridnn-demo.safetensors";
};

// y = relu(x W1^T) W2^T, keeping what backward needs.
struct TwoLayerNet {
  Tensor w1, w2;          // [hidden, inputs], [outputs, hidden]
  Tensor pre, act, out;   // activations of the last forward

  TwoLayerNet(const Config& c, Device d, uint64_t seed, const char* name) {
    w1 = Tensor::empty({c.hidden, c.inputs}, DType::f32, d);
    w2 = Tensor::empty({c.outputs, c.hidden}, DType::f32, d);
    ops::kaiming_normal_(w1, c.inputs, {seed, philox_stream_id((std::string(name) + ".fc1").c_str())});
    ops::kaiming_normal_(w2, c.hidden, {seed, philox_stream_id((std::string(name) + ".fc2").c_str())}, 1.0f);
    pre = Tensor::empty({c.batch, c.hidden}, DType::f32, d);
    act = Tensor::empty({c.batch, c.hidden}, DType::f32, d);
    out = Tensor::empty({c.batch, c.outputs}, DType::f32, d);
  }

  const Tensor& forward(const Tensor& x) {
    ops::gemm(x, w1, pre, {false, true});
    ops::relu_forward(pre, act);
    ops::gemm(act, w2, out, {false, true});
    return out;
  }

  // Given dL/dout, writes dL/dW1 and dL/dW2 (dh is scratch).
  void backward(const Tensor& x, const Tensor& dout, Tensor& dw1, Tensor& dw2, Tensor& dh) {
    ops::gemm(dout, act, dw2, {true, false});   // dW2 = dout^T act
    ops::gemm(dout, w2, dh);                    // dh = dout W2
    ops::relu_backward(pre, dh, dh);            // through the ReLU
    ops::gemm(dh, x, dw1, {true, false});       // dW1 = dh^T x
  }
};

int run(const Config& c) {
  Device dev = Device::parse(c.device);
  require_device(dev);
  GRIDNN_REQUIRE(c.steps > 0 && c.batch > 0 && c.hidden > 0, "--steps, --batch and --hidden must be > 0");
  TwoLayerNet teacher(c, dev, c.seed + 1000, "teacher"), student(c, dev, c.seed, "student");

  Tensor x = Tensor::empty({c.batch, c.inputs}, DType::f32, dev);
  Tensor target = Tensor::empty({c.batch, c.outputs}, DType::f32, dev);
  Tensor diff = Tensor::empty({c.batch, c.outputs}, DType::f32, dev);
  Tensor dw1 = Tensor::empty(student.w1.shape(), DType::f32, dev);
  Tensor dw2 = Tensor::empty(student.w2.shape(), DType::f32, dev);
  Tensor dh = Tensor::empty({c.batch, c.hidden}, DType::f32, dev);
  const uint64_t data_stream = philox_stream_id("demo.inputs");

  auto start = std::chrono::steady_clock::now();
  double first_loss = 0, loss = 0;
  for (int step = 1; step <= c.steps; ++step) {
    // A fresh batch every step: element offsets continue where the last batch ended.
    ops::normal_(x, 0.0f, 1.0f, {c.seed, data_stream, int64_t(step) * x.numel()});
    target.copy_from(teacher.forward(x));
    diff.copy_from(student.forward(x));
    ops::axpy(-1.0f, target, diff);                          // diff = y_hat - y
    loss = double(ops::sum_squares_all(diff).to_vector<float>()[0]) / double(c.batch);
    if (!std::isfinite(loss))
      throw Error("loss became " + std::to_string(loss) + " at step " + std::to_string(step) +
                  "; lower --lr");
    if (step == 1) first_loss = loss;
    ops::scale(diff, 2.0f / float(c.batch));                 // dL/dy_hat
    student.backward(x, diff, dw1, dw2, dh);
    ops::axpy(-c.lr, dw1, student.w1);
    ops::axpy(-c.lr, dw2, student.w2);
    if (step % c.log_every == 0 || step == 1) std::printf("step %4d  loss %.6f\n", step, loss);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  save_safetensors(c.out, {{"fc1.weight", student.w1}, {"fc2.weight", student.w2}},
                   {{"producer", "gridnn-demo"}, {"steps", std::to_string(c.steps)}});
  SafetensorsFile back = load_safetensors(c.out);
  bool same = back.tensors.at("fc1.weight").to_vector<float>() == student.w1.to_vector<float>() &&
              back.tensors.at("fc2.weight").to_vector<float>() == student.w2.to_vector<float>();
  GRIDNN_REQUIRE(same, "weights read back from ", c.out, " differ from those written");
  std::printf(
      "{\"device\": \"%s\", \"steps\": %d, \"first_loss\": %.6g, \"final_loss\": %.6g, "
      "\"loss_ratio\": %.3g, \"seconds\": %.3f, \"weights\": \"%s\"}\n",
      dev.str().c_str(), c.steps, first_loss, loss, loss / first_loss, seconds, c.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"gridnn-demo: train a two-layer ReLU network to imitate a random teacher, "
               "using gridnn's engine ops, and save it as safetensors"};
  app.add_option("--device", c.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--steps", c.steps, "SGD steps")->capture_default_str()->check(CLI::Range(1, 100000000));
  app.add_option("--batch", c.batch, "samples per step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--hidden", c.hidden, "hidden units")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--lr", c.lr, "learning rate")->capture_default_str()->check(CLI::Range(1e-9, 10.0));
  app.add_option("--seed", c.seed, "random seed")->capture_default_str();
  app.add_option("--log-every", c.log_every, "print the loss every N steps")
      ->capture_default_str()->check(CLI::Range(1, 100000000));
  app.add_option("--out", c.out, "where to save the trained weights")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gridnn-demo: error: %s\n", e.what());
    return 1;
  }
}
