// Convolution and pooling on depth slabs (domain parallelism, docs/design.md §4): one wrapper
// around the single-process layer, for Conv3d, MaxPool3d and AvgPool3d alike.
//
// Distribution. The activation's depth is split over the grid's row (parallel/halo.h's
// DepthSplit): rank r holds input planes balanced_range(D_in, Pr, r) and computes output
// planes balanced_range(D_out, Pr, r) of every sample of its batch shard; H, W, channels whole.
// The wrapped layer is the single-process one with no depth padding; it runs on the
// "extended slab" the halo exchange builds (the input planes its output planes read: its
// own, its neighbours' and padding planes outside the volume, filled with `padding_value`):
//
//   forward:  x (own planes) --halo.extend--> extended slab --layer--> y (own output planes)
//   backward: dy --layer backward--> d(extended slab) --halo.return_gradient--> dx (own planes)
//
// Overlap (HaloMode::overlap, for a convolution whose halo moves planes; not the default): the
// exchange is started, the output planes whose windows read only this rank's planes are
// convolved while the halo planes travel, and the output planes at the slab's edges once they
// are in (Conv3d::forward_in_parts); in backward the halo planes' gradients leave as soon as
// the input gradient is computed and travel while the weight gradient is (Conv3d::
// on_input_gradient). Each output plane and each gradient is computed by the same kernel
// from the same values as in the blocking order, so the results are the same bit for bit.
//
// The halo pair of parallel/mappings.h, labelled with the layer's name. Weights (a
// convolution's) are replicated on the stage; each rank's backward adds its partial
// gradients (from its own output planes), summed over the stage after backward
// (grad_sum_over). Parameter names, shapes and initialization are the single-process
// layer's (it is registered under the wrapper's own name). A depth too thin for the row's
// size is an error at construction naming the layer and the largest usable Pr.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "core/profile.h"
#include "models/layers/conv3d.h"
#include "models/layers/module.h"
#include "parallel/halo.h"
#include "parallel/process_grid.h"

namespace gridnn::nn {

class DomainParallel : public Module {
 public:
  // `layer`: the single-process layer with depth padding 0; `window`: the layer's own kernel,
  // stride and padding along depth; `global_in_depth`: D_in of the whole volume. The grid
  // must outlive the layer.
  DomainParallel(parallel::ProcessGrid& grid, std::unique_ptr<Module> layer, parallel::DepthWindow window,
                 int64_t global_in_depth, float padding_value, const std::string& kind,
                 parallel::HaloMode mode = parallel::HaloMode::blocking);

  Tensor forward(const Tensor& x) override;  // [B, C, own input planes, H, W] -> own output planes
  Shape describe(const Shape& input, plan::RankStep& step) const override;

  const parallel::DepthHalo& halo() const { return exchange_.halo(); }
  Module& layer() { return *layer_; }
  float padding_value() const { return padding_value_; }  // of the planes outside the volume
  // Whether the forward convolves the inner planes while the halo travels (above).
  bool overlaps_forward() const { return parts_.inner.out_count > 0; }
  // Whether the halo gradients travel while the weight gradient is computed (above).
  bool returning_overlaps() const { return overlap_ && conv_->input_gradient(); }

 private:
  Tensor do_backward(const Tensor& dy) override;  // undefined when the layer computes no input gradient

  ProfileKind profile_kind_;  // the wrapped layer's: convolution or pooling
  Module* layer_;
  Conv3d* conv_;  // layer_ when it is a convolution, else null
  parallel::HaloExchange exchange_;
  float padding_value_;
  // Overlap: the own planes' place in the extended slab and the forward's parts (none inner:
  // the forward waits for the halo first); the halo gradients under way.
  int64_t own_at_ = 0;
  Conv3d::Parts parts_;
  bool overlap_ = false;  // HaloMode::overlap, a convolution whose halo moves planes
  std::optional<parallel::HaloInFlight> returning_;
};

// The domain-parallel forms of the single-process layers (their arguments, per dimension
// {depth, height, width}, plus the global input depth): convolution (zero padding) and
// pooling (max pooling pads with -inf, average pooling with zeros and counts them, as
// PyTorch does; a pooling stride {0, 0, 0} is the kernel). `name` names the layer until
// name_modules names it (errors at construction say it).
using Triple3 = std::array<int64_t, 3>;
std::unique_ptr<DomainParallel> domain_conv3d(parallel::ProcessGrid& grid, int64_t in_channels, int64_t out_channels,
                                              Triple3 kernel, Triple3 stride, Triple3 padding, bool bias,
                                              int64_t global_in_depth, bool input_gradient = true,
                                              const std::string& name = "Conv3d",
                                              parallel::HaloMode mode = parallel::HaloMode::blocking);
std::unique_ptr<DomainParallel> domain_max_pool3d(parallel::ProcessGrid& grid, Triple3 kernel, Triple3 stride,
                                                  Triple3 padding, int64_t global_in_depth,
                                                  const std::string& name = "MaxPool3d");
std::unique_ptr<DomainParallel> domain_avg_pool3d(parallel::ProcessGrid& grid, Triple3 kernel, Triple3 stride,
                                                  Triple3 padding, int64_t global_in_depth,
                                                  const std::string& name = "AvgPool3d");

}  // namespace gridnn::nn
