// 3D-ResAttNet: BasicBlock and the network, forward and backward side by side.
#include "models/nets/resattnet3d.h"

#include "core/error.h"

namespace gridnn::nn {

void validate(const ResAttNetConfig& c) {
  GRIDNN_REQUIRE(c.depth == 18 || c.depth == 34, "ResAttNet3D: depth must be 18 or 34, got ", c.depth);
  GRIDNN_REQUIRE(c.width >= 1, "ResAttNet3D: width must be >= 1, got ", c.width);
  GRIDNN_REQUIRE(c.in_channels >= 1, "ResAttNet3D: input channels must be >= 1, got ", c.in_channels);
  GRIDNN_REQUIRE(c.classes >= 2, "ResAttNet3D: need at least 2 classes, got ", c.classes);
  // att3 sees 4w channels, att4 8w; queries and keys have C / 8 of them.
  GRIDNN_REQUIRE(!c.attention3 || (4 * c.width) % 8 == 0,
                 "ResAttNet3D: attention after layer3 needs 4 * width divisible by 8; use an "
                 "even width (got ",
                 c.width, ") or switch att3 off");
}

std::string describe(const ResAttNetConfig& c) {
  std::string att = c.attention3 && c.attention4 ? "layer3 and layer4"
                    : c.attention3               ? "layer3"
                    : c.attention4               ? "layer4"
                                                 : "";
  return "ResAttNet3D-" + std::to_string(c.depth) + ", width " + std::to_string(c.width) + ", " +
         std::to_string(c.in_channels) + " -> " + std::to_string(c.classes) + " classes, " +
         (att.empty() ? std::string("no attention") : "attention after " + att);
}

// ---- BasicBlock ------------------------------------------------------------------------

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t in_depth,
                       const LayerFactory& layers)
    : Module("BasicBlock") {
  const int64_t mid_depth = window_output_depth(in_depth, 3, stride, 1);
  conv1_ = &register_module("conv1", layers.conv3d(in_channels, out_channels, 3, stride, 1, false, in_depth));
  bn1_ = &register_module("bn1", layers.batchnorm3d(out_channels, mid_depth, ops::BnActivation::relu));
  conv2_ = &register_module("conv2", layers.conv3d(out_channels, out_channels, 3, 1, 1, false, mid_depth));
  bn2_ = &register_module("bn2", layers.batchnorm3d(out_channels, mid_depth));
  if (stride != 1 || in_channels != out_channels) {
    auto down = std::make_unique<Sequential>();
    down->add(layers.conv3d(in_channels, out_channels, 1, stride, 0, false, in_depth));
    down->add(layers.batchnorm3d(out_channels, mid_depth));
    downsample_ = &register_module("downsample", std::move(down));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  // One layer per statement: each output is let go of once the next exists (in evaluation
  // nothing else holds it), as describe states.
  Tensor h = conv1_->forward(x);
  h = bn1_->forward(h);
  h = conv2_->forward(h);
  h = bn2_->forward(h);
  h = residual_add(h, downsample_ ? downsample_->forward(x) : x);
  return relu_out_.forward(h);
}

Shape BasicBlock::describe(const Shape& in, plan::RankStep& step) const {
  // The memory model sees the shortcut as its structure: x held (fork), the main path, the
  // shortcut's own layers (branch), the sum (join), then the last ReLU.
  step.memory.push_back(structure(plan::LayerMemory::Op::fork));
  Shape h = bn1_->describe(conv1_->describe(in, step), step);
  step.memory.back().grad_in_place = true;  // backward gives it conv2's gradient
  h = bn2_->describe(conv2_->describe(h, step), step);
  step.memory.push_back(structure(plan::LayerMemory::Op::branch));
  if (downsample_) downsample_->describe(in, step);
  plan::LayerMemory join = structure(plan::LayerMemory::Op::join);
  join.output = activation_bytes(h);
  step.memory.push_back(join);
  relu_out_.describe(h, step);
  step.memory.back().layer = name() + ".relu";
  step.memory.back().dy_held_to_fork = true;  // the block's backward holds its dy throughout
  return h;
}

plan::LayerMemory BasicBlock::structure(plan::LayerMemory::Op op) const {
  plan::LayerMemory m;
  m.op = op;
  m.layer = name();
  return m;
}

Tensor BasicBlock::do_backward(const Tensor& dy) {
  const Tensor d = relu_out_.backward(dy);  // reaches both branches unchanged
  // One statement per layer, so that each gradient is freed as soon as the next exists.
  Tensor dx = bn2_->backward(d);
  dx = conv2_->backward(std::move(dx));
  dx = bn1_->backward(std::move(dx));  // written over: describe says so
  dx = conv1_->backward(std::move(dx));
  return residual_add(dx, downsample_ ? downsample_->backward(d) : d);
}

// ---- ResAttNet3D -----------------------------------------------------------------------

ResAttNet3D::ResAttNet3D(const ResAttNetConfig& config, const LayerFactory& layers)
    : Module("ResAttNet3D"), config_(config) {
  validate(config);
  const int64_t w = config.width;
  // The global size of the activation at hand, each side shrinking as the depth does.
  std::array<int64_t, 3> size = config.input_size;
  auto shrink = [&size](int64_t k, int64_t s, int64_t p) {
    for (int64_t& side : size) side = window_output_depth(side, k, s, p);
  };
  const int64_t& depth = size[0];
  // The factory's distribution switch at a block's input, if any (one per network), and the
  // factory of the layers at hand (another past the switch).
  std::unique_ptr<Module> split;
  std::string split_name;
  const LayerFactory* at_hand = &layers;
  auto block_input = [&](const std::string& block) {
    // At the stem the block's input is the network's: a gradient only where it gives one.
    LayerFactory::BlockInput in = at_hand->block_input(block, depth, block != "stem" || config.input_gradient);
    if (in.module) {
      split = std::move(in.module);
      split_name = block;
    }
    if (in.layers) at_hand = in.layers;
  };
  block_input("stem");
  conv1_ =
      &register_module("conv1", at_hand->conv3d(config.in_channels, w, 7, 2, 3, false, depth, config.input_gradient));
  shrink(7, 2, 3);
  bn1_ = &register_module("bn1", at_hand->batchnorm3d(w, depth, ops::BnActivation::relu));
  maxpool_ = &register_module("maxpool", at_hand->maxpool3d(3, 2, 1, depth));
  shrink(3, 2, 1);

  const std::array<int, 4> blocks =
      config.depth == 18 ? std::array<int, 4>{2, 2, 2, 2} : std::array<int, 4>{3, 4, 6, 3};
  int64_t channels = w;
  add_block("stem", Part::stem, nullptr, size);
  for (size_t l = 0; l < 4; ++l) {
    const int64_t out = w << l;
    const std::string name = "layer" + std::to_string(l + 1);
    auto layer = std::make_unique<Sequential>();
    std::vector<Module*> residuals;
    for (int b = 0; b < blocks[l]; ++b) {
      const int64_t stride = b == 0 && l > 0 ? 2 : 1;
      block_input(name + "." + std::to_string(b));
      residuals.push_back(
          &layer->add(std::make_unique<BasicBlock>(b == 0 ? channels : out, out, stride, depth, *at_hand)));
      shrink(3, stride, 1);
    }
    channels = out;
    register_module(name, std::move(layer));
    for (size_t b = 0; b < residuals.size(); ++b)
      add_block(name + "." + std::to_string(b), Part::residual, residuals[b], size);
    if (l == 2 && config.attention3) {
      block_input("att3");
      att3_ = &register_module("att3", at_hand->attention(channels, depth));
      add_block("att3", Part::attention, att3_, size);
    }
    if (l == 3 && config.attention4) {
      block_input("att4");
      att4_ = &register_module("att4", at_hand->attention(channels, depth));
      add_block("att4", Part::attention, att4_, size);
    }
  }
  block_input("head");
  avgpool_ = &register_module("avgpool", at_hand->global_avg_pool(size[0] * size[1] * size[2], size[0]));
  fc_ = &register_module("fc", at_hand->linear(channels, config.classes));
  add_block("head", Part::head, nullptr);
  if (split) {  // no state: the state_dict does not change
    split_ = &register_module("batch_split", std::move(split));
    for (size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].name == split_name) split_block_ = i;
  }
}

void ResAttNet3D::add_block(std::string name, Part part, Module* module, std::array<int64_t, 3> output_size) {
  std::vector<std::string> prefixes;
  if (part == Part::stem)
    prefixes = {"conv1.", "bn1."};
  else if (part == Part::head)
    prefixes = {"fc."};
  else
    prefixes = {name + "."};
  blocks_.push_back({std::move(name), std::move(prefixes), output_size});
  block_parts_.emplace_back(part, module);
}

Shape ResAttNet3D::describe(const Shape& input, plan::RankStep& step) const {
  return describe_blocks(0, block_count(), input, step);
}

Shape ResAttNet3D::describe_block(size_t i, const Shape& input, plan::RankStep& step) const {
  const auto& [part, module] = block_parts_.at(i);
  const Shape in = split_ && i == split_block_ ? split_->describe(input, step) : input;
  switch (part) {
    case Part::stem: {
      const Shape s = bn1_->describe(conv1_->describe(in, step), step);
      step.memory.back().grad_in_place = true;  // backward gives it the pooling's gradient
      return maxpool_->describe(s, step);
    }
    case Part::head:
      return fc_->describe(avgpool_->describe(in, step), step);
    default:
      return module->describe(in, step);
  }
}

Tensor ResAttNet3D::forward(const Tensor& x) {
  require_layer(x.defined() && x.rank() == 5 && x.size(1) == config_.in_channels, "ResAttNet3D",
                "expects an input [B, " + std::to_string(config_.in_channels) + ", D, H, W], got " +
                    (x.defined() ? x.str() : std::string("(undefined)")));
  return forward_blocks(0, block_count(), x);
}

Tensor ResAttNet3D::do_backward(const Tensor& dlogits) { return backward_blocks(0, block_count(), dlogits); }

bool ResAttNet3D::recomputable(size_t i) const {
  // The stem too: its input is the batch, which stays anyway, and it holds the largest
  // activations (a full-resolution convolution, batch norm and ReLU before the pooling).
  return block_parts_.at(i).first != Part::head;
}

void ResAttNet3D::release_block(size_t i) {
  const auto& [part, module] = block_parts_.at(i);
  if (split_ && i == split_block_) split_->release_saved();
  switch (part) {
    case Part::stem:
      for (Module* m : {conv1_, bn1_, maxpool_}) m->release_saved();
      return;
    case Part::head:  // not recomputable
      return;
    default:
      module->release_saved();
  }
}

Tensor ResAttNet3D::forward_block(size_t i, const Tensor& x) {
  const Tensor in = split_ && i == split_block_ ? split_->forward(x) : x;
  return forward_block_layers(i, in);
}

Tensor ResAttNet3D::forward_block_layers(size_t i, const Tensor& x) {
  const auto& [part, module] = block_parts_.at(i);
  switch (part) {
    case Part::stem: {
      Tensor h = conv1_->forward(x);
      h = bn1_->forward(h);
      return maxpool_->forward(h);
    }
    case Part::head:
      return fc_->forward(avgpool_->forward(x));
    default:
      return module->forward(x);
  }
}

Tensor ResAttNet3D::backward_block(size_t i, Tensor dy) {
  Tensor d = backward_block_layers(i, std::move(dy));
  return split_ && i == split_block_ && d.defined() ? split_->backward(std::move(d)) : d;
}

Tensor ResAttNet3D::backward_block_layers(size_t i, Tensor dy) {
  const auto& [part, module] = block_parts_.at(i);
  switch (part) {
    case Part::stem: {  // one statement per layer: each gradient is freed once the next exists
      Tensor d = maxpool_->backward(std::move(dy));
      d = bn1_->backward(std::move(d));  // written over: describe says so
      return conv1_->backward(std::move(d));
    }
    case Part::head:
      return avgpool_->backward(fc_->backward(std::move(dy)));
    default:
      return module->backward(std::move(dy));
  }
}

}  // namespace gridnn::nn
