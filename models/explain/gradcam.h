// 3D Grad-CAM (Selvaraju et al. 2017; docs/design.md §5): where in a volume a network finds
// the evidence for a class.
//
//   y_c      the logit of class c (before softmax) of one sample, in evaluation mode;
//   A        the output [C, D, H, W] of a target block of the network (nn::BlockNetwork);
//   alpha_k  = (1 / (D H W)) * sum over voxels of dy_c / dA_k   (global average of the gradient)
//   map      = ReLU(sum_k alpha_k A_k)                           [D, H, W], the block's resolution
//
// It is MONAI's GradCAM definition (and test/parity/make_gradcam_fixtures.py's). The network
// runs in evaluation mode (batch norm on its running statistics, which stay untouched), so
// the samples of a batch are independent: one backward seeded with 1 at each row's class
// gives every sample's own gradient. Only the blocks above the target run backward;
// parameter gradients are zeroed afterwards.
//
// On a process grid (docs/design.md §4) a rank holds its batch shard's samples and, while
// the target block's output is split over the row (depth_is_split), the depth slab of them:
// alpha's sums are all-reduced over the row (in rank order, so every rank has the same
// bits) and divided by the global voxel count; the slabs of the map are then gathered over
// the row, so every rank of the row returns the whole coarse map of its samples, equal to
// the single process's up to the reassociation of the sums.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/module.h"
#include "models/nets/blocks.h"
#include "parallel/communicator.h"

namespace gridnn::explain {

// The blocks Grad-CAM can explain, by name: those whose output is a volume.
std::vector<std::string> explainable_layers(const nn::BlockNetwork& net);
// The default target: the last attention block ("att4", else "att3"), else the last
// explainable block.
std::string default_layer(const nn::BlockNetwork& net);
// The block index of layer `name`; gridnn::Error listing the explainable layers otherwise.
size_t layer_index(const nn::BlockNetwork& net, const std::string& name);

struct CoarseCam {
  Tensor logits;                // [B, classes] f32, CPU
  std::vector<int64_t> target;  // the class explained, per sample
  Tensor weights;               // alpha [B, C] f32, CPU
  Tensor maps;                  // [B, D, H, W] f32, CPU: the whole map at the block's resolution
};

// Grad-CAM of block `layer` of `model` (which is `net`) for this rank's batch `x` (any
// device; [B, C, D, H, W], depth-split over `row` as the grid's layers expect). `target`:
// the class to explain, or -1 for each sample's predicted class (the first largest logit).
// `row`: the model/domain communicator (a one-rank one on a single process); collective
// over it. Puts the model in evaluation mode and leaves it there.
CoarseCam grad_cam(nn::Module& model, nn::BlockNetwork& net, size_t layer, const Tensor& x, int64_t target,
                   parallel::Communicator& row);

// Trilinear resampling of a map [D, H, W] to `size` as PyTorch's F.interpolate does with
// align_corners=False: along an axis of n planes resized to m, output o samples source
// coordinate s = max((o + 0.5) * n / m - 0.5, 0) between planes floor(s) and
// min(floor(s) + 1, n - 1) (data::resample_trilinear_at at those positions).
Tensor upsample_map(const Tensor& map, const std::array<int64_t, 3>& size);

// (map - min) / (max - min) into [0, 1]; a constant map (no evidence: all zero after the
// ReLU) gives zeros, and `flat` (when given) is set.
Tensor normalize_map(const Tensor& map, bool* flat = nullptr);

}  // namespace gridnn::explain
