// Class activation maps in 3D (docs/design.md §5): where in a volume a network finds the
// evidence for a class. With
//
//   y_c      the logit of class c (before softmax) of one sample, in evaluation mode;
//   A        the output [C, D, H, W] of a target block of the network (nn::BlockNetwork);
//   g        = dy_c / dA, and V = D H W, the voxels of the whole output,
//
// the methods (CamMethod) are
//
//   gradcam    Selvaraju et al. 2017:  w_k = (1 / V) sum_v g_k(v);
//                                      map = ReLU(sum_k w_k A_k)
//   gradcam++  Chattopadhay et al. 2018, as MONAI's GradCAMpp: with S_k = sum_v A_k(v),
//                                      a_k(v) = g^2 / (2 g^2 + S_k g^3 + 1e-7) (a zero
//                                      denominator before the 1e-7 counts as 1);
//                                      w_k = sum_v a_k(v) ReLU(g_k(v));
//                                      map = ReLU(sum_k w_k A_k).  MONAI multiplies the
//                                      ReLU's argument by exp(y_c): one positive factor per
//                                      sample, which the map's normalization removes, so
//                                      gridnn leaves it out (it overflows for large logits)
//   hirescam   Draelos & Carin 2020:   map(v) = ReLU(sum_k g_k(v) A_k(v)), element-wise: each
//                                      voxel keeps its own gradient, not the channel's mean
//
// all at the block's resolution [D, H, W]. For a block followed only by global average
// pooling and linear layers g is constant over the voxels and gradcam equals hirescam / V.
// Grad-CAM is MONAI's GradCAM definition (test/parity/make_gradcam_fixtures.py checks all
// three). The network runs in evaluation mode (batch norm on its running statistics, which
// stay untouched), so the samples of a batch are independent: one backward seeded with 1 at
// each row's class gives every sample's own gradient. Only the blocks above the lowest
// target run backward; parameter gradients are zeroed afterwards. Several target blocks
// share one forward and one backward.
//
// On a process grid (docs/design.md §4) a rank holds its batch shard's samples and, while
// the target block's output is split over the row (depth_is_split), the depth slab of them:
// the sums over voxels (w, S) are all-reduced over the row (in rank order, so every rank has
// the same bits), and gradcam divides by the global voxel count; the slabs of the map are
// then gathered over the row, so every rank of the row returns the whole coarse map of its
// samples, equal to the single process's up to the reassociation of the sums.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/names.h"
#include "core/tensor.h"
#include "models/layers/module.h"
#include "models/nets/blocks.h"
#include "parallel/communicator.h"

namespace gridnn::explain {

enum class CamMethod { gradcam, gradcam_pp, hirescam };
inline constexpr EnumName<CamMethod> kCamMethodNames[] = {
    {CamMethod::gradcam, "gradcam", "channel weights: the gradient's mean"},
    {CamMethod::gradcam_pp, "gradcam++", "channel weights from the positive gradients"},
    {CamMethod::hirescam, "hirescam", "gradient times activation at every voxel"}};
constexpr EnumNames<CamMethod> enum_names(CamMethod) { return {"explanation method", kCamMethodNames}; }

// The blocks Grad-CAM can explain, by name: those whose output is a volume.
std::vector<std::string> explainable_layers(const nn::BlockNetwork& net);
// The default target: the last attention block ("att4", else "att3"), else the last
// explainable block.
std::string default_layer(const nn::BlockNetwork& net);
// The block index of layer `name`; gridnn::Error listing the explainable layers otherwise.
size_t layer_index(const nn::BlockNetwork& net, const std::string& name);
// The blocks a --explain-layer value names, in network order without repeats: a
// comma-separated list of items, each a block ("layer3.1", "att4"), a group of blocks
// ("layer3": layer3.0, layer3.1, ...), or either followed by "+" (it and every explainable
// block after it: "layer3+" is layer3.0 to att4). Empty: the default layer. gridnn::Error
// listing the explainable layers for an unknown name.
std::vector<size_t> parse_layers(const nn::BlockNetwork& net, const std::string& spec);

struct CoarseCam {
  Tensor logits;                // [B, classes] f32, CPU
  std::vector<int64_t> target;  // the class explained, per sample
  Tensor weights;               // w [B, C] f32, CPU (undefined for hirescam, which has none)
  Tensor maps;                  // [B, D, H, W] f32, CPU: the whole map at the block's resolution
};

// The maps of `method` at blocks `layers` (ascending, see parse_layers) of `model` (which is
// `net`) for this rank's batch `x` (any device; [B, C, D, H, W], depth-split over `row` as
// the grid's layers expect), one CoarseCam per layer (each with the same logits and
// targets). `classes`: the class to explain per sample, or empty for each sample's predicted
// class (the first largest logit). `row`: the model/domain communicator (a one-rank one on a
// single process); collective over it. Puts the model in evaluation mode and leaves it there.
std::vector<CoarseCam> class_activation_maps(nn::Module& model, nn::BlockNetwork& net,
                                             const std::vector<size_t>& layers, const Tensor& x,
                                             const std::vector<int64_t>& classes, parallel::Communicator& row,
                                             CamMethod method);

// One layer; `target` the class for every sample, or -1 for each one's predicted class.
CoarseCam grad_cam(nn::Module& model, nn::BlockNetwork& net, size_t layer, const Tensor& x, int64_t target,
                   parallel::Communicator& row, CamMethod method = CamMethod::gradcam);

// Trilinear resampling of a map [D, H, W] to `size` as PyTorch's F.interpolate does with
// align_corners=False: along an axis of n planes resized to m, output o samples source
// coordinate s = max((o + 0.5) * n / m - 0.5, 0) between planes floor(s) and
// min(floor(s) + 1, n - 1) (data::resample_trilinear_at at those positions).
Tensor upsample_map(const Tensor& map, const std::array<int64_t, 3>& size);

// (map - min) / (max - min) into [0, 1]; a constant map (no evidence: all zero after the
// ReLU) gives zeros, and `flat` (when given) is set.
Tensor normalize_map(const Tensor& map, bool* flat = nullptr);

}  // namespace gridnn::explain
