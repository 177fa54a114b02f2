// nn::DistConv3d: Conv3d on a depth slab (DESIGN §4, domain parallel). The activation's depth
// is split over the row communicator (parallel/halo.h's DepthSplit); each rank computes the
// output planes it owns from an extended slab its HaloExchange builds:
//
//   forward:  x (own input planes) --halo.extend: fetch planes, zero padding--> extended slab
//             --local Conv3d, depth padding 0, H/W padding as given--> y (own output planes)
//   backward: dy --local backward--> d(extended slab) --halo.return_gradient--> dx (own planes)
//
// Parameters: "weight" [out, in, kd, kh, kw] and "bias" [out], the names, shapes and
// initialization of nn::Conv3d (it is one), so state_dict names match the single-process
// network. Weights are replicated: backward adds this rank's PARTIAL weight and bias
// gradients (from its own output planes) and does NOT reduce them; the trainer all-reduces
// replicated gradients over the stage (DESIGN §4).
//
// The halo traffic is labelled with the layer's name (CommLayerScope). The plan is made at
// construction: a depth too thin for the row's size is an error there, naming the layer and
// the largest usable Pr. geometry() (inherited) is the local geometry of the extended slab.
#pragma once

#include <string>

#include "models/layers/conv3d.h"
#include "parallel/halo.h"

namespace gridnn::nn {

class DistConv3d : public Conv3d {
 public:
  // global_in_depth: D_in of the whole volume; `row` splits it (its size is Pr) and must
  // outlive the layer. `layer` names it in errors and in the communication log.
  DistConv3d(parallel::Communicator& row, int64_t in_channels, int64_t out_channels, Triple kernel,
             Triple stride, Triple padding, bool bias, int64_t global_in_depth,
             std::string layer = "DistConv3d");
  DistConv3d(parallel::Communicator& row, int64_t in_channels, int64_t out_channels, int64_t kernel,
             int64_t stride, int64_t padding, bool bias, int64_t global_in_depth,
             std::string layer = "DistConv3d");

  // x: [B, C, own input planes, H, W] -> [B, O, own output planes, H', W'].
  Tensor forward(const Tensor& x) override;
  // dy: [B, O, own output planes, H', W'] -> dx [B, C, own input planes, H, W] (undefined
  // when set_input_gradient(false): then no gradient planes travel either).
  Tensor backward(const Tensor& dy) override;

  const parallel::DepthHalo& halo() const { return exchange_.halo(); }
  const std::string& layer_name() const { return exchange_.layer(); }
  void set_layer_name(std::string layer) { exchange_.set_layer(std::move(layer)); }
  void on_named(const std::string& name) override { set_layer_name(name); }

 private:
  parallel::HaloExchange exchange_;
};

}  // namespace gridnn::nn
