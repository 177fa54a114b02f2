#include "test/support/layer_check.h"

#include "test/support/random_tensor.h"

namespace gridnn::test {

::testing::AssertionResult check_layer_gradients(nn::Module& layer, Tensor& x, const LayerCheckOptions& o) {
  Tensor y = layer.forward(x);
  Tensor w = random_tensor(y.shape(), o.seed);
  layer.zero_grad();
  Tensor dx = layer.backward(w);
  auto loss = [&] { return weighted_sum(layer.forward(x), w); };

  if (o.check_input) {
    ::testing::AssertionResult r = check_gradient(loss, x, dx, o.grad);
    if (!r) return ::testing::AssertionFailure() << "input: " << r.message();
  }
  if (o.check_parameters) {
    for (auto& [name, p] : layer.named_parameters()) {
      Tensor analytic = p->grad.clone();  // later forwards must not disturb it
      ::testing::AssertionResult r = check_gradient(loss, p->value, analytic, o.grad);
      if (!r) return ::testing::AssertionFailure() << "parameter " << name << ": " << r.message();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gridnn::test
