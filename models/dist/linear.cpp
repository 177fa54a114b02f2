// nn::DistLinear: row blocks of the weight, Y blocks all-gathered (see the header).
#include "models/dist/linear.h"

#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/random.h"
#include "kernels/reduce.h"

namespace gridnn::nn {
namespace {

}  // namespace

DistLinear::DistLinear(parallel::Communicator& row, int64_t in_features, int64_t out_features,
                       bool bias, Device device)
    : row_(row), in_(in_features), out_(out_features) {
  require_layer(in_features > 0 && out_features > 0, "DistLinear",
                "in_features and out_features must be > 0, got " + std::to_string(in_features) +
                    " and " + std::to_string(out_features));
  require_layer(out_features >= row.size(), name(),
                std::to_string(out_features) + " outputs split over " + std::to_string(row.size()) +
                    " row ranks leave a rank without rows; the largest usable Pr is " +
                    std::to_string(out_features));
  block_ = parallel::balanced_range(out_, row.size(), row.rank());
  weight_ = &register_parameter("weight", Tensor::zeros({block_.size(), in_}, DType::f32, device));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({block_.size()}, DType::f32, device));
}

std::string DistLinear::name() const {
  return "DistLinear(" + std::to_string(in_) + ", " + std::to_string(out_) + ")";
}

// Linear's initializer, each element keyed by its index in the full tensor.
void DistLinear::reset_parameters(uint64_t seed, const std::string& prefix) {
  const float bound = 1.0f / std::sqrt(float(in_));
  ops::uniform_(weight_->value, -bound, bound,
                ops::RandomKey::named(seed, prefix + "weight", block_.begin * in_));
  if (bias_)
    ops::uniform_(bias_->value, -bound, bound,
                  ops::RandomKey::named(seed, prefix + "bias", block_.begin));
}

std::vector<int64_t> DistLinear::block_rows() const {
  std::vector<int64_t> rows(size_t(row_.size()));
  for (int i = 0; i < row_.size(); ++i)
    rows[size_t(i)] = parallel::balanced_range(out_, row_.size(), i).size();
  return rows;
}

const Tensor& DistLinear::identity(int64_t n, const Tensor& like) {
  if (!identity_.defined() || identity_.size(0) != n || identity_.device() != like.device()) {
    Tensor host = Tensor::zeros({n, n}, DType::f32);
    float* p = host.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i * n + i] = 1.0f;
    identity_ = host.to(like.device());
  }
  return identity_;
}

Tensor DistLinear::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 2 && x.size(1) == in_, name(),
                "expects input [N, " + std::to_string(in_) + "], got " +
                    (x.defined() ? x.str() : "undefined") +
                    "; flatten the input or change in_features");
  require_layer(x.device() == weight_->value.device(), name(),
                "input " + x.str() + " is not on the weight's device " + weight_->value.str());
  parallel::CommLayerScope scope(comm_label_);
  input_ = x;
  const int64_t b = x.size(0);
  Tensor yt_block = Tensor::empty({block_.size(), b}, x.dtype(), x.device());
  ops::gemm(weight_->value, x, yt_block,
            ops::gemm_options(false, true, 0.0f, math_mode()));  // Y_r^T = W_r X^T
  if (bias_ && b > 0) {
    Tensor ones = Tensor::empty({1, b}, x.dtype(), x.device());
    ops::fill(ones, 1.0);
    ops::gemm(bias_->value.reshape({block_.size(), 1}), ones, yt_block,
              ops::gemm_options(false, false, 1.0f));  // + b_r 1^T
  }
  // All row blocks of Y^T, stacked (backward: a split, dY_r^T = rows of dY^T).
  Tensor yt = Tensor::empty({out_, b}, x.dtype(), x.device());
  row_.all_gatherv(yt_block, yt, block_rows());
  Tensor y = Tensor::empty({b, out_}, x.dtype(), x.device());
  if (b > 0) ops::gemm(identity(b, x), yt, y, ops::gemm_options(false, true));  // Y = I (Y^T)^T, exact
  return y;
}

Tensor DistLinear::backward(const Tensor& dy) {
  require_layer(input_.defined(), name(), "backward called before forward");
  const int64_t b = input_.size(0);
  require_layer(dy.defined() && dy.rank() == 2 && dy.size(0) == b && dy.size(1) == out_, name(),
                "dy " + (dy.defined() ? dy.str() : std::string("undefined")) +
                    " does not match the output [" + std::to_string(b) + ", " +
                    std::to_string(out_) + "] of the last forward");
  parallel::CommLayerScope scope(comm_label_);
  Tensor dx = Tensor::zeros(input_.shape(), dy.dtype(), dy.device());
  if (b > 0) {
    // The forward's gather, reversed: this rank's rows of dY^T (dY is replicated: a split).
    Tensor dyt = Tensor::empty({out_, b}, dy.dtype(), dy.device());
    ops::gemm(dy, identity(b, dy), dyt, ops::gemm_options(true, false));  // dY^T = dY^T I, exact
    const Tensor dyt_block = dyt.narrow(block_.begin, block_.size());
    ops::gemm(dyt_block, weight_->value, dx,
              ops::gemm_options(true, false, 0.0f, math_mode()));  // dX_r = dY_r W_r
    ops::gemm(dyt_block, input_, weight_->grad,
              ops::gemm_options(false, false, 1.0f, math_mode()));            // dW_r += dY_r^T X
    if (bias_) ops::axpy(1.0f, ops::sum(dyt_block, 1), bias_->grad);  // db_r += sum over the batch
  }
  // The input was replicated over the row (a copy): its gradient is the sum of the blocks'.
  row_.all_reduce(dx);
  return dx;
}

NamedTensors DistLinear::gather(bool grads) {
  parallel::CommLayerScope scope(comm_label_);
  const std::vector<int64_t> rows = block_rows();
  NamedTensors out;
  const Tensor& w = grads ? weight_->grad : weight_->value;
  Tensor full_w = Tensor::empty({out_, in_}, w.dtype(), w.device());
  row_.all_gatherv(w, full_w, rows);
  out.emplace_back("weight", full_w);
  if (bias_) {
    const Tensor& bv = grads ? bias_->grad : bias_->value;
    Tensor full_b = Tensor::empty({out_}, bv.dtype(), bv.device());
    row_.all_gatherv(bv, full_b, rows);
    out.emplace_back("bias", full_b);
  }
  return out;
}

NamedTensors DistLinear::gather_parameters() { return gather(false); }
NamedTensors DistLinear::gather_gradients() { return gather(true); }

Tensor DistLinear::gather_whole(const Tensor& block) {
  parallel::CommLayerScope scope(comm_label_);
  Tensor whole = Tensor::empty(whole_shape(block), block.dtype(), block.device());
  row_.all_gatherv(block, whole, block_rows());
  return whole;
}

Tensor DistLinear::take_block(const Tensor& whole) const {
  require_layer(whole.defined() && whole.rank() >= 1 && whole.size(0) == out_, name(),
                "take_block: expected " + std::to_string(out_) + " rows, got " +
                    (whole.defined() ? whole.str() : std::string("(undefined)")));
  return whole.narrow(block_.begin, block_.size()).clone();
}

Shape DistLinear::whole_shape(const Tensor& block) const {
  require_layer(block.defined() && block.rank() >= 1 && block.size(0) == block_.size(), name(),
                "whole_shape: " + (block.defined() ? block.str() : std::string("(undefined)")) +
                    " is not a block of " + std::to_string(block_.size()) + " rows");
  return block.shape().with(0, out_);
}

void DistLinear::scatter_parameters(const std::map<std::string, Tensor>& full) {
  auto take = [&](const std::string& key, const Shape& global, Parameter& p) {
    auto it = full.find(key);
    require_layer(it != full.end(), name(), "scatter_parameters: no tensor \"" + key + "\"");
    require_layer(it->second.shape() == global && it->second.dtype() == p.value.dtype(), name(),
                  "scatter_parameters: \"" + key + "\" is " + it->second.str() +
                      ", expected the full " + global.str() + " " + dtype_name(p.value.dtype()));
    ops::copy(it->second.narrow(block_.begin, block_.size()), p.value);
  };
  take("weight", Shape{out_, in_}, *weight_);
  if (bias_) take("bias", Shape{out_}, *bias_);
}

}  // namespace gridnn::nn
