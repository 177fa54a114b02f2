// A region of interest (a binary mask NIfTI file) brought onto the network's input grid, for
// render_montage's outline (montage.h).
//
// The mask must lie in the scan's own stored voxel grid: the same stored dims and the same
// voxel-to-world affine (read_nifti_volume's, orientation.h), every entry within 1e-3 mm.
// Nothing is resampled between grids; a mask in another grid is refused with both shapes
// and both affines (resample it onto the scan first).
//
// Network voxel (d, h, w) is inside (1) when the stored voxel nearest to
// scan.to_stored(d, h, w) (each index rounded half up) lies in the stored grid and the mask
// is nonzero there; else it is 0 (padding, or a zero voxel).
#pragma once

#include <string>

#include "core/tensor.h"
#include "models/data/nifti_dataset.h"

namespace gridnn::explain {

// The mask at `path` on scan.volume's grid: CPU f32 [D, H, W] of 0 and 1. gridnn::Error
// naming the file for an unreadable or 4-D file or a mask in another voxel grid.
Tensor region_in_network_space(const std::string& path, const data::Scan& scan);

}  // namespace gridnn::explain
