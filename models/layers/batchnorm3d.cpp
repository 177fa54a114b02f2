// nn::BatchNorm3d on the steps of kernels/batchnorm.h (see the header for the semantics).
#include "models/layers/batchnorm3d.h"

#include <vector>

#include "core/profile.h"
#include "kernels/batchnorm.h"
#include "kernels/elementwise.h"

namespace gridnn::nn {

BatchNorm3d::BatchNorm3d(int64_t num_features, double eps, double momentum, Device device,
                         parallel::Communicator* statistics_over, ops::BnActivation activation)
    : Module("BatchNorm3d"),
      statistics_over_(statistics_over),
      activation_(activation),
      channels_(num_features),
      eps_(eps),
      momentum_(momentum) {
  require_layer(num_features >= 1, "BatchNorm3d", "num_features must be >= 1, got " + std::to_string(num_features));
  require_layer(eps > 0, "BatchNorm3d", "eps must be > 0");
  require_layer(momentum >= 0 && momentum <= 1, "BatchNorm3d", "momentum must be in [0, 1]");
  const Shape c{num_features};
  weight_ = &register_parameter("weight", Tensor::empty(c, DType::f32, device));
  bias_ = &register_parameter("bias", Tensor::empty(c, DType::f32, device));
  running_mean_ = &register_buffer("running_mean", Tensor::empty(c, DType::f32, device));
  running_var_ = &register_buffer("running_var", Tensor::empty(c, DType::f32, device));
  num_batches_tracked_ = &register_buffer("num_batches_tracked", Tensor::empty(Shape{}, DType::i64, device));
  reset_parameters(0, "");
  on_device_change(device);
  if (statistics_over) weight_->layout.grad_sum_over = bias_->layout.grad_sum_over = statistics_over;
}

int64_t BatchNorm3d::reduce_count(int64_t local_count) {
  if (!statistics_over_) return local_count;
  parallel::CommLayerScope scope(name());
  Tensor count = Tensor::from_vector(std::vector<int64_t>{local_count}, Shape{1});  // on the host
  statistics_over_->all_reduce(count);
  return count.data<int64_t>()[0];
}

void BatchNorm3d::reduce_sums(Tensor& sums) {
  if (!statistics_over_) return;
  parallel::CommLayerScope scope(name());
  statistics_over_->all_reduce(sums);
}

Shape BatchNorm3d::describe(const Shape& in, plan::RankStep& step) const {
  require_layer(in.rank() == 5 && in[1] == channels_, name(), "cannot run on an input " + in.str());
  plan::LayerShape l;
  l.name = name();
  l.kind = plan::LayerKind::bn;
  l.in_channels = l.out_channels = channels_;
  l.in_size = l.out_size = {in[2], in[3], in[4]};
  l.weights = 2 * channels_;
  l.forward_flops = 4.0 * double(channels_) * double(in[2] * in[3] * in[4]);
  l.samples = in[0];
  step.layers.push_back(l);
  plan::LayerMemory m;  // keeps its input (x - mean, and with the ReLU fused bn(x), are recomputed in backward)
  m.layer = name();
  m.output = m.input_grad = activation_bytes(in);
  m.keeps_input = true;
  m.state = 3 * stored_bytes(channels_ * int64_t(sizeof(float))) + stored_bytes(2 * channels_ * int64_t(sizeof(float)));
  step.memory.push_back(m);
  if (statistics_over_) {  // forward: the count, the sums for the mean, then both sums; backward: both sums
    for (int64_t n : {int64_t(1), channels_, 2 * channels_, 2 * channels_})
      step.calls.push_back(
          plan::make_call(name(), statistics_over_->name(), "all_reduce", n, statistics_over_->size()));
    step.calls.back().backward = true;
  }
  return in;
}

void BatchNorm3d::on_device_change(const Device& device) {
  const Shape c{channels_};
  mean_ = Tensor::empty(c, DType::f32, device);
  var_ = Tensor::empty(c, DType::f32, device);
  invstd_ = Tensor::empty(c, DType::f32, device);
  sums_ = Tensor::empty({2, channels_}, DType::f32, device);
  input_ = Tensor();
}

// As PyTorch's reset_parameters: running statistics reset, weight 1, bias 0 (no randomness).
void BatchNorm3d::reset_parameters(uint64_t /*seed*/, const std::string& /*prefix*/) {
  ops::fill(weight_->value, 1.0);
  ops::fill(bias_->value, 0.0);
  ops::fill(*running_mean_, 0.0);
  ops::fill(*running_var_, 1.0);
  ops::fill(*num_batches_tracked_, 0.0);
}

void BatchNorm3d::check_input(const Tensor& x) const {
  require_layer(x.defined(), "BatchNorm3d", "forward got an undefined input");
  require_layer(x.rank() == 5, "BatchNorm3d",
                "expected a 5D input [N, C, D, H, W], got " + x.str() + " (rank " + std::to_string(x.rank()) + ")");
  require_layer(x.size(1) == channels_, "BatchNorm3d",
                "input " + x.str() + " has " + std::to_string(x.size(1)) + " channels, but the layer has " +
                    std::to_string(channels_) + " (num_features); match the channel counts");
  require_layer(x.device() == mean_.device(), "BatchNorm3d",
                "input " + x.str() + " is not on the layer's device " + mean_.device().str());
}

Tensor BatchNorm3d::forward(const Tensor& x) {
  const ProfileScope profile(ProfileKind::batchnorm_relu, name(), ProfilePass::forward);
  check_input(x);
  batch_statistics_ = is_training();
  if (batch_statistics_) {
    const Tensor none;
    count_ = reduce_count(x.numel() / channels_);
    ops::batchnorm_channel_sums(x, none, sums_);  // pass 1: sum(x) -> mean
    Tensor mean_sums = sums_.narrow(0, 1);        // row 1 is not used yet
    reduce_sums(mean_sums);
    require_layer(count_ > 1, "BatchNorm3d",
                  "Expected more than 1 value per channel when training, got input size " + x.shape().str() +
                      "; use a larger batch or volume, or eval()");
    Tensor no_var;
    ops::batchnorm_moments(sums_, none, count_, mean_, no_var);
    ops::batchnorm_channel_sums(x, mean_, sums_);  // pass 2: sums of x - mean and its square
    reduce_sums(sums_);
    ops::batchnorm_moments(sums_, mean_, count_, mean_, var_);
    ops::batchnorm_invstd(var_, eps_, invstd_);
    if (!RecomputeScope::active())  // a recomputed forward has updated them already
      ops::batchnorm_update_running(mean_, var_, count_, momentum_, *running_mean_, *running_var_,
                                    *num_batches_tracked_);
  } else {
    ops::copy(*running_mean_, mean_);
    ops::batchnorm_invstd(*running_var_, eps_, invstd_);
  }
  if (!NoBackwardScope::active()) input_ = x;  // kept for backward
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::batchnorm_normalize(x, mean_, invstd_, weight_->value, bias_->value, y, activation_);
  return y;
}

Tensor BatchNorm3d::do_backward(const Tensor& dy) {
  const ProfileScope profile(ProfileKind::batchnorm_relu, name(), ProfilePass::backward);
  require_layer(input_.defined(), "BatchNorm3d", "backward called before forward");
  require_layer(dy.defined() && dy.shape() == input_.shape(), "BatchNorm3d",
                "dy " + (dy.defined() ? dy.shape().str() : std::string("(undefined)")) + " does not match the input " +
                    input_.shape().str());
  // dx over dy when nothing but Module::backward's argument holds it (the caller gave it up).
  Tensor dx = dy.sole_handle() ? dy : Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  // With the fused ReLU both passes read dy through its gate: dL/d(bn(x)) is never written.
  const ops::BnBackwardGate gate{activation_, weight_->value, bias_->value};
  ops::batchnorm_backward_sums(input_, dy, mean_, invstd_, sums_, gate);
  // This rank's share of the parameter gradients, added before the sums are reduced: the
  // stage-wide gradient all-reduce of a distributed run then sums the shares once.
  ops::axpy(1.0f, sums_.narrow(1, 1).reshape({channels_}), weight_->grad);
  ops::axpy(1.0f, sums_.narrow(0, 1).reshape({channels_}), bias_->grad);
  if (batch_statistics_) reduce_sums(sums_);
  ops::batchnorm_backward_input(input_, dy, mean_, invstd_, weight_->value, sums_, count_, batch_statistics_, dx, gate);
  input_ = Tensor();  // used: freed now, not at the next forward
  return dx;
}

}  // namespace gridnn::nn
