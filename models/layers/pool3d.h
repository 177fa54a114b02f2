// Pooling layers over [N, C, D, H, W], PyTorch's semantics (kernels/pool3d.h):
//   MaxPool3d(kernel, stride = kernel, padding = 0)   -inf padding, ties to the first max
//   AvgPool3d(kernel, stride = kernel, padding = 0)   count_include_pad = true
//   GlobalAvgPool3d                                   [N, C, D, H, W] -> [N, C] mean
// No parameters; backward returns dx (x's shape).
#pragma once

#include <array>

#include "kernels/pool3d.h"
#include "models/layers/module.h"

namespace gridnn::nn {

using Triple3 = std::array<int64_t, 3>;  // depth, height, width

// The cost model's record of a pooling window (kind pool) or of global average pooling
// (kind global_pool: `output` {1, 1, 1}) over `input` [b, C, D, H, W] (this rank's).
plan::LayerShape pool_layer_shape(const std::string& name, plan::LayerKind kind, const Shape& input,
                                  const Shape& output, const Triple3& kernel, const Triple3& stride,
                                  const Triple3& padding);

class MaxPool3d : public Module {
 public:
  // stride {0, 0, 0} (the default) means stride = kernel, as PyTorch's stride=None.
  explicit MaxPool3d(Triple3 kernel, Triple3 stride = {0, 0, 0}, Triple3 padding = {0, 0, 0});
  explicit MaxPool3d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;
  const ops::Pool3dParams& params() const { return params_; }
  // The argmax of the last forward: flat index into each input volume (PyTorch's indices).
  const Tensor& indices() const { return argmax_; }

 private:
  void drop_saved() override { argmax_ = Tensor(); }
  Tensor do_backward(const Tensor& dy) override;

  ops::Pool3dParams params_;
  Shape input_shape_;
  Tensor argmax_;
};

class AvgPool3d : public Module {
 public:
  explicit AvgPool3d(Triple3 kernel, Triple3 stride = {0, 0, 0}, Triple3 padding = {0, 0, 0});
  explicit AvgPool3d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;
  const ops::Pool3dParams& params() const { return params_; }

 private:
  Tensor do_backward(const Tensor& dy) override;

  ops::Pool3dParams params_;
  Shape input_shape_;
};

class GlobalAvgPool3d : public Module {
 public:
  GlobalAvgPool3d() : Module("GlobalAvgPool3d") {}
  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

 private:
  Tensor do_backward(const Tensor& dy) override;

  Shape input_shape_;
};

}  // namespace gridnn::nn
