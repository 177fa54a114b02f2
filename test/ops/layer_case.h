// A layer as a case of the op harness: its inputs are x and then the layer's parameters
// (drawn by Module::initialize), its output is y = forward(x), and its backward returns
// dL/dx and then each parameter's gradient, so every mode checks the parameters too.
//
//   OpCase c = layer_case("Conv3d", "3x3x3_pad1", [] { return std::make_unique<nn::Conv3d>(...); },
//                         {2, 3, 5, 6, 7});
//   c.reference = [](const Tensors& in) { ... in[0] is x, in[1] the weight, in[2] the bias ... };
//
// Each run builds a fresh layer (make), moves it to the inputs' device, copies the
// parameters from the inputs and runs it in training or evaluation mode.
//
// layer_backward_case(c, dy_shape) makes the layer's backward a case of its own, so that a
// reference can hold its gradients to exact loops (the grad mode holds them to central
// differences): inputs x, the parameters and then dy; outputs dx and then each parameter's
// gradient (the layer's `backward` after one forward).
#pragma once

#include <memory>

#include "models/layers/module.h"
#include "test/ops/harness.h"

namespace gridnn::test {

using LayerMaker = std::function<std::unique_ptr<nn::Module>()>;

OpCase layer_case(const std::string& op, const std::string& params, LayerMaker make, const Shape& x_shape,
                  bool training = true);
// Its reference is unset; set it.
OpCase layer_backward_case(const OpCase& layer, const Shape& dy_shape);

}  // namespace gridnn::test
