// Parameter-free layers: ReLU, Flatten, and the residual add.
#pragma once

#include "models/layers/module.h"

namespace gridnn::nn {

// y = max(x, 0); backward passes dy where the input was positive.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  void drop_saved() override { input_ = Tensor(); }
  Tensor do_backward(const Tensor& dy) override;

  Tensor input_;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...] (a view); backward restores the shape.
class Flatten : public Module {
 public:
  Flatten() : Module("Flatten") {}
  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;

  Shape input_shape_;
};

// out = a + b for the shortcut of a residual block. Its backward is the identity for both
// inputs (the caller hands dy to both branches), so there is nothing to keep.
Tensor residual_add(const Tensor& a, const Tensor& b);

}  // namespace gridnn::nn
