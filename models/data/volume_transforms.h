// Whole-volume transforms on CPU f32 tensors [D, H, W], used by NiftiDataset to bring a
// volume to the model's input size and to augment it. Plain loops in double precision
// where it matters; each returns a new tensor or works in place, as its name says.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace gridnn::data {

// Center crop or zero pad of each axis to target {D, H, W}. Along an axis of size n, output
// index o reads input o + shift with shift = (n - t) / 2 when n >= t and -((t - n) / 2)
// when n < t (integer division: an odd difference puts the extra voxel at the end).
Tensor center_crop_or_pad(const Tensor& volume, const std::array<int64_t, 3>& target);

// Trilinear resampling to target {D, H, W}, corner-aligned: along an axis of size n, output
// index o samples source coordinate o * (n - 1) / (t - 1) (the middle, (n - 1) / 2, when
// t = 1). Exact for volumes linear in their indices.
Tensor resample_trilinear(const Tensor& volume, const std::array<int64_t, 3>& target);

// Trilinear resampling to target {D, H, W} at given positions: along axis a, output index o
// samples source coordinate scale[a] * o + offset[a], clamped to [0, n - 1] (beyond the outer
// voxel centres the edge value). resample_to_spacing (orientation.h) uses it voxel-centre
// aligned; the positions are exactly those of its IndexMap.
Tensor resample_trilinear_at(const Tensor& volume, const std::array<int64_t, 3>& target,
                             const std::array<double, 3>& scale, const std::array<double, 3>& offset);

// In place: (x - mean) / std over all elements (population std, in double); a constant
// volume only has its mean subtracted.
void zscore_(Tensor& volume);

// In place: reverses the axes whose flag is set ({D, H, W}).
void flip_(Tensor& volume, const std::array<bool, 3>& axes);

}  // namespace gridnn::data
