// Where a scan's voxels are, and the index maps that carry a voxel of the network's input
// back to the voxel of the file it came from.
//
// Affine (voxel (i, j, k) -> world mm (x, y, z), +x Right, +y Anterior, +z Superior), as
// nibabel 5.0's get_best_affine computes it (read_nifti_volume fills it, nifti_volume.h):
//   - sform when sform_code > 0: the rows srow_x/y/z (float32 in NIfTI-1, promoted exactly);
//   - else qform when qform_code > 0: R(quatern_b, c, d) * diag(dx, dy, qfac * dz) + qoffset,
//     computed like nibabel (fillpositive and quat2mat in long double, then rounded to
//     double), with nibabel's header fixes: pixdim[1..3] 0 -> 1, negative -> |.|; qfac =
//     pixdim[0] when it is -1 or 1, else 1;
//   - else (source none) nibabel's base affine diag(-dx, dy, dz) centred on the volume (LAS).
//   A negative code is not set (the NIfTI standard and nifti_clib test "> 0"; nibabel tests
//   "!= 0", so a file with a negative code is the one place the two differ). Analyze 7.5
//   files have no codes: source none.
//
// Canonical orientation is nibabel 5.0's as_closest_canonical on the data: io_orientation of
// the affine (zooms = column norms, 0 -> 1; the orthogonal polar factor R of the normalised
// 3x3 part; then greedily over voxel axes j = 0, 1, 2: world axis o_j = argmax |R[:, j]|,
// first on ties, flip f_j = sign(R[o_j, j]) (+1 for 0), and row o_j of R is zeroed), then
// axis j of the stored array is flipped when f_j = -1 and moved to world axis o_j. Nothing
// is resampled: an oblique scan keeps its obliquity in the new affine. The axis order of
// nibabel 5.0 is pinned (nibabel >= 5.4 visits the columns in another order and can differ
// for strongly oblique affines). A degenerate affine (an axis with no world direction) is
// an error naming the file. With both codes unset the stored voxel order is kept (nibabel
// would flip i by its LAS base affine) and one warning per process names the first such
// file: "sform, else qform, else the stored voxel order".
//
// Tensor index order: a volume is a [D, H, W] tensor whose index (d, h, w) is the voxel
// (i, j, k) = (w, h, d): tensor axis a is voxel axis 2 - a. So the canonical tensor is
// [S, A, R]: d grows toward Superior, h toward Anterior, w toward Right.
//
// Index maps (IndexMap) go from a derived grid to an earlier one, in tensor index order
// and voxel-centre coordinates: earlier = m * later + t. Every step of the preprocessing is
// one, and they compose (compose(a, b) = a after b):
//   - orientation: canonical -> stored, a signed permutation with integer offsets (exact);
//   - spacing (resample_to_spacing): voxel-centre aligned, p = (o + 0.5) * n / n' - 0.5,
//     i.e. m = n / n', t = m / 2 - 0.5; the resampler samples exactly at m * o + t,
//     clamped to [0, n - 1] (edge values beyond the outer voxel centres);
//   - fit crop/pad: p = o + shift; fit resample: corner-aligned p = o * (n - 1) / (t - 1)
//     (t = 1: p = (n - 1) / 2, m = 0), as center_crop_or_pad and resample_trilinear do
//     (volume_transforms.h; the resampler's positions agree with m * o to within an ulp).
// A network-space map goes back to the stored grid with map_to_stored.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/names.h"
#include "core/tensor.h"

namespace gridnn::data {

// Voxel index (i, j, k) -> world mm (x, y, z) as a 4x4 row-major matrix.
using Affine = std::array<std::array<double, 4>, 4>;
enum class AffineSource { sform, qform, none };  // which header field gave it
inline constexpr EnumName<AffineSource> kAffineSourceNames[] = {
    {AffineSource::sform, "sform"}, {AffineSource::qform, "qform"}, {AffineSource::none, "none"}};
constexpr EnumNames<AffineSource> enum_names(AffineSource) { return {"affine source", kAffineSourceNames}; }
inline const char* affine_source_name(AffineSource source) { return enum_name(source); }

// A scan as stored: what its header says about where the voxels are.
struct ScanGeometry {
  std::string path;
  std::array<int64_t, 3> dims{};  // stored tensor {D, H, W} = {dim[3], dim[2], dim[1]}
  Affine affine{};                // see above: sform > qform > nibabel's base affine
  AffineSource source = AffineSource::none;
  std::array<double, 3> zooms{};  // voxel size along i, j, k (mm): the affine's column norms
};

// Maps a voxel index of one [D, H, W] tensor to an index of another, in [D, H, W] index order
// (index 0 = d, 1 = h, 2 = w): to = m * from + t, as a 3x4 row-major matrix [m | t].
using IndexMap = std::array<std::array<double, 4>, 3>;

enum class Orientation { canonical, native };
inline constexpr EnumName<Orientation> kOrientationNames[] = {
    {Orientation::canonical, "canonical", "nibabel's closest canonical RAS+, from the sform, else the qform"},
    {Orientation::native, "native", "the stored voxel order"}};
constexpr EnumNames<Orientation> enum_names(Orientation) { return {"orientation", kOrientationNames}; }

// nibabel 5.0's io_orientation: for voxel axis j (0 = i, 1 = j, 2 = k), {o_j, f_j}: the world
// axis (0 = x, 1 = y, 2 = z) it runs along and +1 or -1. Throws gridnn::Error for a
// degenerate or non-finite affine (`what` names the file in the message).
using AxisOrientation = std::array<std::array<int, 2>, 3>;
AxisOrientation io_orientation(const Affine& affine, const std::string& what = "affine");

IndexMap identity_index_map();
// (outer after inner)(x) = outer(inner(x)).
IndexMap compose(const IndexMap& outer, const IndexMap& inner);
std::array<double, 3> apply_index_map(const IndexMap& map, const std::array<double, 3>& index);

// The affine of a derived grid: voxel (i, j, k) of the tensor whose index maps to the stored
// tensor by `to_stored` -> world mm. For the orientation map it is nibabel's
// as_closest_canonical affine (A @ inv_ornt_aff; bitwise for the usual float32-valued
// axis-aligned affines, else within 1e-12 relative: numpy's product rounds through BLAS); for
// the whole chain, the network input's.
Affine grid_affine(const Affine& stored_affine, const IndexMap& to_stored);

// A volume on a grid derived from the stored one.
struct GridVolume {
  Tensor volume;                    // [D, H, W] CPU f32
  IndexMap to_stored{};             // this tensor's index -> stored tensor index
  std::array<double, 3> spacing{};  // voxel size along D, H, W (mm)
};

// The orientation map alone: canonical (or native: identity) tensor index -> stored index,
// and the dims of the reoriented tensor in *dims when given.
IndexMap orientation_index_map(const ScanGeometry& geometry, Orientation orientation,
                               std::array<int64_t, 3>* dims = nullptr);

// `stored` (the file's tensor, dims geometry.dims) in canonical or native order. Native, an
// identity orientation and source none (with the warning above, for canonical) share the
// stored tensor's storage; a reorientation is an exact copy.
GridVolume orient(const Tensor& stored, const ScanGeometry& geometry, Orientation orientation);

// Trilinear resampling to voxels of `mm` along every axis (voxel-centre aligned, see above):
// n' = max(1, round(n * spacing / mm)) per axis. mm must be > 0.
GridVolume resample_to_spacing(const GridVolume& grid, double mm);

// The fit step's index maps (network input index -> the grid it was fitted from).
IndexMap crop_or_pad_index_map(const std::array<int64_t, 3>& from, const std::array<int64_t, 3>& target);
IndexMap resample_index_map(const std::array<int64_t, 3>& from, const std::array<int64_t, 3>& target);

// A network-space map [D, H, W] (CPU f32) brought to the stored grid stored_dims. to_stored
// must be axis-aligned (a signed permutation with per-axis scale and offset, as every map
// here is). For each stored voxel s the network position x = to_stored^-1(s) is computed per
// axis; an axis whose scale is 0 (a fit of size 1) takes x = (N - 1) / 2. If on every axis x
// lies within e of the network grid's outer voxel centres (-e <= x <= N - 1 + e, up to 1e-9),
// e = max(half a network voxel, half a stored voxel) = max(0.5, 0.5 / |scale|) network
// voxels, the map is sampled trilinearly at x clamped to [0, N - 1] (edge values); otherwise
// (a region cropped away before the network) the value is 0. So every stored voxel the
// network saw gets a value, also when resampling shrank the grid, and a crop without
// resampling zeroes exactly the voxels it dropped. Integer positions give the net_map's values
// exactly, so an orientation-only chain round-trips bitwise.
Tensor map_to_stored(const Tensor& net_map, const IndexMap& to_stored, const std::array<int64_t, 3>& stored_dims);

}  // namespace gridnn::data
