// nn::DistMaxPool3d and nn::DistAvgPool3d: pooling on a depth slab (DESIGN §4), by the same
// halo rule as DistConv3d (parallel/halo.h): the extended slab holds every input plane the
// owned output planes read, and a local pooling with depth padding 0 runs over it.
//
// The padding planes carry each pooling's padding value, so the local window sees exactly
// what the single-process one does:
//   max:     -inf (PyTorch's max padding; a padding plane never wins over a number)
//   average: 0, and count_include_pad = true divides by the whole kernel either way
// H and W pad as given. No parameters; the halo traffic is labelled with the layer's name.
#pragma once

#include <string>

#include "models/layers/pool3d.h"
#include "parallel/halo.h"

namespace gridnn::nn {

class DistMaxPool3d : public Module {
 public:
  // stride {0, 0, 0} means stride = kernel (as MaxPool3d). `row` splits the depth of
  // global_in_depth planes and must outlive the layer.
  DistMaxPool3d(parallel::Communicator& row, Triple3 kernel, Triple3 stride, Triple3 padding,
                int64_t global_in_depth, std::string layer = "DistMaxPool3d");
  DistMaxPool3d(parallel::Communicator& row, int64_t kernel, int64_t stride, int64_t padding,
                int64_t global_in_depth, std::string layer = "DistMaxPool3d");

  Tensor forward(const Tensor& x) override;   // own input planes -> own output planes
  Tensor backward(const Tensor& dy) override;  // -> dx of the own input planes

  const parallel::DepthHalo& halo() const { return exchange_.halo(); }
  const std::string& layer_name() const { return exchange_.layer(); }
  void set_layer_name(std::string layer) { exchange_.set_layer(std::move(layer)); }
  void on_named(const std::string& name) override { set_layer_name(name); }

 private:
  MaxPool3d local_;  // depth padding 0 over the extended slab
  parallel::HaloExchange exchange_;
};

class DistAvgPool3d : public Module {
 public:
  DistAvgPool3d(parallel::Communicator& row, Triple3 kernel, Triple3 stride, Triple3 padding,
                int64_t global_in_depth, std::string layer = "DistAvgPool3d");
  DistAvgPool3d(parallel::Communicator& row, int64_t kernel, int64_t stride, int64_t padding,
                int64_t global_in_depth, std::string layer = "DistAvgPool3d");

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

  const parallel::DepthHalo& halo() const { return exchange_.halo(); }
  const std::string& layer_name() const { return exchange_.layer(); }
  void set_layer_name(std::string layer) { exchange_.set_layer(std::move(layer)); }
  void on_named(const std::string& name) override { set_layer_name(name); }

 private:
  AvgPool3d local_;
  parallel::HaloExchange exchange_;
};

}  // namespace gridnn::nn
