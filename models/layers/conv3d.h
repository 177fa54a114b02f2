// nn::Conv3d: 3D convolution over [N, C, D, H, W] (PyTorch's torch.nn.Conv3d with
// dilation 1 and groups 1), on the ops of kernels/conv3d.h.
//
// Parameters "weight" [out, in, kd, kh, kw] and, unless bias = false, "bias" [out], both
// initialized as PyTorch does: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in kd kh kw.
// forward keeps its input; backward returns dx and adds into weight.grad and bias.grad.
// The three convolutions run in the module's math_mode() (the bias add stays fp32).
#pragma once

#include <array>
#include <functional>

#include "kernels/conv3d.h"
#include "models/layers/module.h"

namespace gridnn::nn {

class Conv3d : public Module {
 public:
  using Triple = ops::Triple;  // depth, height, width

  Conv3d(int64_t in_channels, int64_t out_channels, Triple kernel, Triple stride = {1, 1, 1},
         Triple padding = {0, 0, 0}, bool bias = true);
  // The same kernel size, stride and padding in every dimension.
  Conv3d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true);

  Tensor forward(const Tensor& x) override;
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  // How forward_in_parts splits the output planes along depth, for an input of `depth` planes
  // of which planes [at, at + inner_depth) come first (a layer with no depth padding): the
  // output planes whose windows read only those (inner; none when out_count is 0), and the
  // output planes before and after them (edges), each with the input planes it reads.
  struct Piece {
    int64_t out_first = 0, out_count = 0;  // output planes
    int64_t in_first = 0, in_count = 0;    // the input planes they read
  };
  struct Parts {
    Piece inner;
    std::array<Piece, 2> edges;
  };
  Parts parts(int64_t depth, int64_t at, int64_t inner_depth) const;
  // forward(x) in two parts, bit for bit, for a layer with no depth padding (DomainParallel's
  // overlapped halo, docs/design.md §4): first the inner output planes (parts above) from
  // `inner`, which is planes [at, at + inner.size(2)) of x, x being `depth` planes deep; then
  // `rest()` returns x whole (it waits for the other planes) and the edge planes are computed
  // from it. Where a part would run another kernel than the whole (another oneDNN
  // implementation, or vol2col; any GPU's, whose algorithms are chosen per shape) it waits
  // for rest() first and runs forward(x).
  Tensor forward_in_parts(const Tensor& inner, int64_t at, int64_t depth, const std::function<Tensor()>& rest);
  // What the CPU's passes on an input of this shape allocate besides their operands
  // (ops::conv3d_cpu_memory): describe's, and DomainParallel's for the parts.
  ops::Conv3dCpuMemory cpu_memory(const Shape& in) const;
  // Runs once in each backward that computes dx, with dx final and before the weight gradient
  // is computed (DomainParallel sends a slab's halo gradients meanwhile); empty: nothing.
  void on_input_gradient(std::function<void(const Tensor& dx)> ready) { input_gradient_ready_ = std::move(ready); }

  // Whether backward computes dx (default). The first layer of a network, whose input is
  // data, can skip it: backward then returns an undefined tensor.
  void set_input_gradient(bool needed) { input_gradient_ = needed; }

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }  // null without bias
  bool input_gradient() const { return input_gradient_; }
  // The geometry of the last forward (input size included).
  const ops::Conv3dGeometry& geometry() const { return geometry_; }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  void drop_saved() override { input_ = Tensor(); }
  Tensor do_backward(const Tensor& dy) override;

  int64_t in_channels_, out_channels_;
  Triple kernel_, stride_, padding_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  // The geometry of an input x, or of a 5-D shape (checked, errors naming the layer).
  ops::Conv3dGeometry geometry_of(const Tensor& x) const;
  ops::Conv3dGeometry geometry_of(const Shape& x) const;
  // y = this convolution of x (geometry g), nothing kept.
  Tensor convolve(const Tensor& x, const ops::Conv3dGeometry& g) const;

  Tensor input_;
  ops::Conv3dGeometry geometry_;
  bool input_gradient_ = true;
  std::function<void(const Tensor& dx)> input_gradient_ready_;
};

}  // namespace gridnn::nn
