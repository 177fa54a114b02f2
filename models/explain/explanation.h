// Heatmaps of a batch (gridnn-predict --explain, docs/design.md §5): the class activation
// maps (gradcam.h) of one or more blocks, fused, and averaged over test-time transforms of
// the input, at the network's input resolution.
//
// Fusion of blocks: each block's coarse map is upsampled to the input size (upsample_map)
// and normalized to [0, 1] (normalize_map); the fused map is their mean. Blocks of different
// resolutions thus count equally, and a block with no positive evidence adds zeros.
//
// Test-time transforms (--explain-tta N): transform t = 0 .. N - 1 of a volume [D, H, W]
//   shift  j = t / 2: j = 0 none; else, with k = j - 1, along axis (k / 2) % 3 (d, h, w) by
//          (k even ? +1 : -1) * (1 + k / 6) * max(1, n / 24) voxels, n that axis's size: the
//          content moves by that many voxels and the plane at the border repeats;
//   flip   t odd: w -> W - 1 - w after the shift (left-right for a canonical RAS+ volume).
// So t = 0 is the volume itself, 1 its mirror, 2 and 3 a shift up the depth, 4 and 5 down...
// Each transform explains the class fixed by the untransformed input (its predicted class or
// the one asked for); its fused map is mapped back exactly (unflipped, unshifted: input voxel
// v takes the transformed map's value at v + shift), and each input voxel's heat is the mean
// over the transforms whose shifted content covers it (the identity covers every voxel),
// normalized to [0, 1]. The transforms act on the whole volume before a rank takes its depth
// slab, so the heat is the same on every grid up to the maps' reassociation.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/explain/gradcam.h"
#include "parallel/process_grid.h"

namespace gridnn::explain {

struct ExplainOptions {
  CamMethod method = CamMethod::gradcam;
  std::vector<size_t> layers;  // block indices, ascending (parse_layers)
  int64_t tta = 1;             // test-time transforms, at least 1 (the volume itself)
  int64_t target = -1;         // the class to explain in every sample; -1: each one's predicted class
};

struct TtaTransform {
  int axis = 0;       // of the shift: 0 = d, 1 = h, 2 = w
  int64_t shift = 0;  // voxels the content moves along `axis`
  bool flip = false;  // w -> W - 1 - w, after the shift
};

// Transform t of a volume of `size` {D, H, W}.
TtaTransform tta_transform(int64_t t, const std::array<int64_t, 3>& size);
// The transformed volume [D, H, W] (CPU f32).
Tensor transform_volume(const Tensor& volume, const TtaTransform& t);
// Adds `map` [D, H, W] (of the transformed volume) mapped back to the input into `sum`, and 1
// into `count` at every voxel it reaches.
void add_mapped_back(const Tensor& map, const TtaTransform& t, Tensor& sum, Tensor& count);
// The mean of the blocks' maps of sample `b` (cams of class_activation_maps), each upsampled
// to `size` and normalized.
Tensor fuse_layers(const std::vector<CoarseCam>& cams, int64_t b, const std::array<int64_t, 3>& size);

struct BatchExplanation {
  Tensor logits;                // [B, classes] of the untransformed input, CPU
  std::vector<int64_t> target;  // the class explained, per sample
  Tensor heat;                  // [B, D, H, W] in [0, 1], CPU
  std::vector<bool> flat;       // per sample: no positive evidence anywhere (heat all zero)
};

// The heatmaps of `volumes` [B, D, H, W] (CPU f32, this rank's samples, whole volumes): each
// transform's batch takes planes `depth` of every transformed volume, runs on `device`, and
// its maps are computed over `row` (collective over it).
BatchExplanation explain_batch(nn::Module& model, nn::BlockNetwork& net, const Tensor& volumes, parallel::Range depth,
                               Device device, const ExplainOptions& options, parallel::Communicator& row);

}  // namespace gridnn::explain
