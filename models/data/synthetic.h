// A synthetic 3D classification task that a ResAttNet3D can really learn: brain-like
// volumes whose class shows in their structure, not in a single voxel.
//
// Every sample is a head-shaped ellipsoid with a bright cortex-like shell, a darker
// interior and two ventricle-like cavities. Class k of K enlarges the cavities (by up to
// 1.6x at k = K - 1) and thins the shell (to 0.55x), as atrophy does; on top of that each
// sample varies in head size and position (a random shift of up to 10% of each axis),
// cavity size (±15%), contrast, and carries Gaussian noise (sigma 0.15 of the shell's
// brightness; the normal quantized to 65536 levels, models/data/gaussian_noise.h). Labels
// alternate (sample i has class i mod K), so any index range is balanced.
//
// Deterministic: sample i is a function of (seed, i) only; with Augment enabled it is
// shifted by up to one more voxel per axis and its noise redrawn, keyed by (augment.seed,
// epoch, i). Samples are generated on the fly (no storage); any depth slab can be
// generated alone.
#pragma once

#include <cstdint>

#include "models/data/dataset.h"

namespace gridnn::data {

struct SyntheticOptions {
  int64_t samples = 512;
  int64_t first_index = 0;  // sample ids first_index ... (a validation set uses another range)
  int64_t classes = 2;
  int64_t channels = 1;    // every channel holds the same volume
  Shape size{32, 32, 32};  // D, H, W
  uint64_t seed = 1;
  float noise = 0.15f;
};

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options);

  int64_t size() const override { return options_.samples; }
  Shape sample_shape() const override;
  int64_t num_classes() const override { return options_.classes; }
  int64_t label(int64_t index) const override;
  int64_t load(int64_t index, Tensor& x, const Augment& augment, const DepthSlab& slab = {}) const override;
  std::string describe(int64_t index) const override;

 private:
  SyntheticOptions options_;
};

}  // namespace gridnn::data
