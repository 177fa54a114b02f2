// Reading one MRI volume from a NIfTI file into a CPU f32 tensor [D, H, W].
//
// The NIfTI C library (nifti2_io) parses the header: binary NIfTI-1 and NIfTI-2 (and
// Analyze 7.5), single files (.nii, .nii.gz) and pairs (.hdr + .img, gzipped or not), in
// either byte order (the library swaps the header and reports the data's byte order; the
// data is swapped with its nifti_swap_Nbytes). The voxel data is read here, through the
// library's znz streams, rather than by nifti_image_load, which would silently replace
// non-finite floats by 0 and allocate whatever the header claims before reading.
//
// Axes: NIfTI's i (dim[1], fastest in the file) is W, j (dim[2]) is H and k (dim[3]) is
// D, so voxel (i, j, k) lands at [k, j, i] and the file's data order is already the
// row-major order of [D, H, W]: nothing is transposed. Orientation (qform/sform) is not
// applied here: the volume is in its stored voxel order, and the overload with a
// ScanGeometry also returns the header's affine (computed as nibabel 5.0 does, rules in
// orientation.h), which orient() (orientation.h) uses to reorder it to canonical RAS+.
//
// write_nifti_like writes a float32 volume (a heatmap) on a scan's stored grid: a
// single-file NIfTI of the scan's version (NIfTI-1 or -2; .nii.gz gzipped) whose header is
// the scan's own with every geometry field kept byte for byte (dims, pixdim including qfac,
// quatern_b/c/d, qoffset, srow, qform_code and sform_code, xyzt_units, dim_info, descrip), and
// the data fields set: datatype float32, bitpix 32, dim[0] 3, scl_slope 1, scl_inter 0,
// cal_min/max 0, intent 0, no extensions, vox_offset 352 (544), the machine's byte order.
// Viewers that prefer the qform and those that prefer the sform thus overlay it alike. An
// Analyze 7.5 scan (no NIfTI geometry) gives both codes 0.
//
// Values: every integer and real datatype (uint8, int8, int16, uint16, int32, uint32,
// int64, uint64, float32, float64) is converted to f32, with value = stored * scl_slope +
// scl_inter when scl_slope is nonzero and finite (the NIfTI rule: slope 0 means "not
// scaled"). Complex, RGB, float128 and unknown datatypes are rejected.
//
// The reader trusts nothing and throws gridnn::Error naming the file and what to change:
// missing file, unreadable header, not one 3-D volume (a 4-D file with dim[4] > 1 is
// rejected; trailing dimensions of size 1 are fine), non-positive dims, unsupported
// datatype, data shorter than the header declares (read incrementally, so a lying header
// cannot make it allocate more than the file holds), NaN or infinite voxels (stored, or
// produced by scaling or by the conversion to f32). The library's own messages on stderr
// are switched off once per process (nifti_set_debug_level(0), its one global; a few of
// its messages print regardless, next to ours); reading is otherwise free of shared
// state, so several threads may read volumes at once.
//
// A .gz file cannot be read partially: the whole volume is always decompressed and read.
#pragma once

#include <string>

#include "core/tensor.h"
#include "models/data/orientation.h"

namespace gridnn::data {

// The volume stored in `path` as a contiguous CPU f32 tensor [D, H, W] = [dim[3], dim[2],
// dim[1]], scaled by scl_slope/scl_inter.
Tensor read_nifti_volume(const std::string& path);
// The same, and the file's geometry in *geometry when it is not null.
Tensor read_nifti_volume(const std::string& path, ScanGeometry* geometry);
// The geometry alone (header only; the data is not read).
ScanGeometry read_nifti_geometry(const std::string& path);

// `volume` [D, H, W] (CPU f32, exactly the scan's stored dims) written to out_path (.nii or
// .nii.gz) with the geometry of the scan at scan_path, as described above. Errors name the
// files.
void write_nifti_like(const std::string& out_path, const Tensor& volume, const std::string& scan_path);

}  // namespace gridnn::data
