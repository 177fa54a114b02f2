// MLP: flatten, then Linear and ReLU layers; forward and backward side by side.
#include "models/nets/mlp.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"

namespace gridnn::nn {

Mlp::Mlp(const MlpConfig& config, const LayerFactory& layers)
    : Module("MLP"), config_(config), relus_(config.sizes.size() > 2 ? config.sizes.size() - 2 : 0) {
  GRIDNN_REQUIRE(config.sizes.size() >= 2, "MLP: give at least the input and output sizes, got ", config.sizes.size(),
                 " sizes");
  for (size_t i = 0; i < config.sizes.size(); ++i)
    GRIDNN_REQUIRE(config.sizes[i] >= 1, "MLP: layer size ", i, " must be >= 1, got ", config.sizes[i]);
  for (size_t i = 0; i + 1 < config.sizes.size(); ++i) {
    const std::string name = "fc" + std::to_string(i + 1);
    fcs_.push_back(&register_module(name, layers.linear(config.sizes[i], config.sizes[i + 1])));
    blocks_.push_back({name, {name + "."}, {0, 0, 0}});
  }
  whole_ = layers.whole_volume(config.input_depth);
}

Tensor Mlp::forward(const Tensor& input) { return forward_blocks(0, block_count(), input); }
Tensor Mlp::do_backward(const Tensor& dlogits) { return backward_blocks(0, block_count(), dlogits); }

Shape Mlp::describe(const Shape& input, plan::RankStep& step) const {
  return describe_blocks(0, block_count(), input, step);
}

Shape Mlp::describe_block(size_t i, const Shape& input, plan::RankStep& step) const {
  Shape s = input;
  if (i == 0) {
    if (whole_) s = whole_->describe(s, step);
    s = flatten_.describe(s, step);
  }
  const size_t first = step.layers.size();
  s = fcs_.at(i)->describe(s, step);
  if (i == 0 && first < step.layers.size()) step.layers[first].input_gradient = false;
  if (i < relus_.size()) {
    s = relus_[i].describe(s, step);
    step.memory.back().layer = fcs_[i]->name() + " (relu)";
  }
  return s;
}

Tensor Mlp::forward_block(size_t i, const Tensor& input) {
  Tensor h = input;
  if (i == 0) {
    Tensor x = input;
    if (whole_) {
      parallel::CommLayerScope scope(whole_->name());
      x = whole_->forward(input);
    }
    require_layer(x.defined() && x.rank() >= 2 && x.numel() / std::max<int64_t>(x.size(0), 1) == config_.sizes[0],
                  "MLP",
                  "expects [B, ...] with " + std::to_string(config_.sizes[0]) + " features per sample, got " +
                      (x.defined() ? x.str() : std::string("(undefined)")));
    h = flatten_.forward(x);
  }
  h = fcs_.at(i)->forward(h);
  return i < relus_.size() ? relus_[i].forward(h) : h;
}

Tensor Mlp::backward_block(size_t i, Tensor dy) {
  Tensor g = i < relus_.size() ? relus_[i].backward(std::move(dy)) : std::move(dy);
  g = fcs_.at(i)->backward(g);
  if (i > 0) return g;
  g = flatten_.backward(g);
  if (!whole_) return g;
  parallel::CommLayerScope scope(whole_->name());
  return whole_->backward(g);
}

}  // namespace gridnn::nn
