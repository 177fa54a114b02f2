// DistGlobalAvgPool3d: local sums, all_reduce over the row, scale (see the header).
#include "models/dist/global_pool.h"

#include "core/profile.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "models/layers/pool3d.h"

namespace gridnn::nn {

DistGlobalAvgPool3d::DistGlobalAvgPool3d(parallel::Communicator& row, int64_t global_positions)
    : Module("GlobalAvgPool3d"), row_(row), global_positions_(global_positions) {
  require_layer(
      global_positions > 0, "DistGlobalAvgPool3d",
      "global_positions (D * H * W of the whole volume) must be > 0, got " + std::to_string(global_positions));
}

Tensor DistGlobalAvgPool3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::forward);
  require_layer(x.defined() && x.rank() == 5, "DistGlobalAvgPool3d",
                "expects a [B, C, D_r, H, W] slab, got " + (x.defined() ? x.str() : std::string("(undefined)")));
  parallel::CommLayerScope scope(name());
  const int64_t b = x.size(0), c = x.size(1), local = x.size(2) * x.size(3) * x.size(4);
  input_shape_ = x.shape();
  Tensor y = Tensor::empty({b, c}, x.dtype(), x.device());
  if (local > 0)
    ops::reduce(ops::ReduceOp::sum, x.reshape({b, c, local}), 2, y);  // this rank's partial sums
  else
    ops::fill(y, 0.0);
  row_.all_reduce(y);  // the sums over the whole volume, replicated (backward: a copy)
  ops::scale(y, float(1.0 / double(global_positions_)));
  return y;
}

Shape DistGlobalAvgPool3d::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5, name(), "cannot run on an input " + in.str());
  step.layers.push_back(
      pool_layer_shape(name(), plan::LayerKind::global_pool, in, Shape{in[0], in[1]}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}));
  step.calls.push_back(plan::make_call(name(), "row", "all_reduce", in[0] * in[1], row_.size()));
  plan::LayerMemory m;
  m.layer = name();
  m.output = activation_bytes({in[0], in[1]});
  m.input_grad = activation_bytes(in);
  m.backward_scratch = activation_bytes({1, in[2] * in[3] * in[4]});  // the ones row
  step.memory.push_back(m);
  return {in[0], in[1]};
}

Tensor DistGlobalAvgPool3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::pooling, name(), ProfilePass::backward);
  require_layer(input_shape_.rank() == 5, "DistGlobalAvgPool3d", "backward called before forward");
  const int64_t b = input_shape_[0], c = input_shape_[1];
  const int64_t local = input_shape_[2] * input_shape_[3] * input_shape_[4];
  require_layer(dy.defined() && dy.shape() == Shape({b, c}), "DistGlobalAvgPool3d",
                "dy " + (dy.defined() ? dy.str() : std::string("(undefined)")) + " does not match the output [" +
                    std::to_string(b) + ", " + std::to_string(c) + "] of the last forward");
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  // dx = (dy / N) 1^T over own positions: a rank-1 GEMM (one rounding per element).
  Tensor ones = Tensor::empty({1, local}, dy.dtype(), dy.device());
  ops::fill(ones, 1.0);
  ops::GemmOptions o;
  o.alpha = float(1.0 / double(global_positions_));
  Tensor dxm = dx.reshape({b * c, local});
  ops::gemm(dy.reshape({b * c, 1}), ones, dxm, o);
  return dx;
}

}  // namespace gridnn::nn
