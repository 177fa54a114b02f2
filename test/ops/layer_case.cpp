#include "test/ops/layer_case.h"

#include "core/philox.h"

namespace gridnn::test {
namespace {

// A fresh layer on the inputs' device holding the parameters in[1], in[2], ...
std::unique_ptr<nn::Module> layer_with(const LayerMaker& make, const Tensors& in, bool training) {
  std::unique_ptr<nn::Module> m = make();
  m->to(in[0].device());
  m->train(training);
  auto params = m->named_parameters();
  GRIDNN_REQUIRE(params.size() + 1 == in.size(), "layer_case: ", params.size(), " parameters, ", in.size() - 1,
                 " given");
  for (size_t k = 0; k < params.size(); ++k) params[k].second->value.copy_from(in[k + 1]);
  return m;
}

}  // namespace

OpCase layer_case(const std::string& op, const std::string& params, LayerMaker make, const Shape& x_shape,
                  bool training) {
  OpCase c;
  c.op = op;
  c.params = params + " " + shape_name(x_shape) + (training ? "" : " eval");
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    std::unique_ptr<nn::Module> m = make();
    m->initialize(philox_stream_id(key.c_str()));
    Tensors in{case_input(key, 0, x_shape)};
    for (auto& [name, p] : m->named_parameters()) in.push_back(p->value.clone());
    return in;
  };
  c.run = [=](const Tensors& in) { return Tensors{layer_with(make, in, training)->forward(in[0])}; };
  c.backward = [=](const Tensors& in, const Tensor& dy) {
    std::unique_ptr<nn::Module> m = layer_with(make, in, training);
    m->forward(in[0]);
    Tensors grads{m->backward(dy)};
    for (auto& [name, p] : m->named_parameters()) grads.push_back(p->grad.clone());
    return grads;
  };
  const int n = int(make()->named_parameters().size());
  for (int i = 0; i <= n; ++i) c.grad_inputs.push_back(i);
  c.ref_tol = {1e-5, 1e-4};
  return c;
}

OpCase layer_backward_case(const OpCase& layer, const Shape& dy_shape) {
  OpCase c = layer;
  c.params += " backward";
  const std::string key = c.op + c.params;
  const auto draw = layer.make_inputs;
  const auto backward = layer.backward;
  c.make_inputs = [=] {
    Tensors in = draw();
    in.push_back(case_input(key, int(in.size()), dy_shape));
    return in;
  };
  c.run = [backward](const Tensors& in) { return backward(Tensors(in.begin(), in.end() - 1), in.back()); };
  c.reference = nullptr;
  c.backward = nullptr;
  c.grad_inputs.clear();
  return c;
}

}  // namespace gridnn::test
