// Writing NIfTI files for tests (test code only).
//
// nifti1_header() lays the 348-byte NIfTI-1 header out byte by byte from the format's
// field offsets, in either byte order, independently of the NIfTI library the reader
// uses; write_nifti_with_library() writes through that library (nifti_image_write), for
// NIfTI-2 and as a second, independent writer. Paths ending in .gz are gzipped.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gridnn::test {

struct NiftiSpec {
  std::vector<int64_t> dims;  // dim[1], dim[2], ...: {W, H, D} or {W, H, D, T, ...}
  int datatype = 16;          // NIFTI_TYPE_* code (16 = float32)
  float scl_slope = 0.0f;     // 0: not scaled
  float scl_inter = 0.0f;
  bool big_endian = false;  // byte order of header and data (hand-written files only)
  // Geometry (hand-written NIfTI-1 files only): the defaults are no codes, pixdim 1, qfac 1.
  int qform_code = 0, sform_code = 0;
  float qfac = 1.0f;                               // pixdim[0]
  std::array<float, 3> pixdim{1.0f, 1.0f, 1.0f};   // pixdim[1..3]
  std::array<float, 3> quatern{0.0f, 0.0f, 0.0f};  // quatern_b, c, d
  std::array<float, 3> qoffset{0.0f, 0.0f, 0.0f};
  std::array<std::array<float, 4>, 3> srow{};  // srow_x, srow_y, srow_z
};

// Stored values converted to `datatype` (a real or integer NIFTI_TYPE_*), in the byte
// order asked for.
std::vector<uint8_t> encode_voxels(int datatype, const std::vector<double>& values, bool big_endian);
// The 348-byte header; single_file adds the 4-byte empty extension flag and sets
// vox_offset = 352 and magic "n+1" (else vox_offset 0 and magic "ni1", for .hdr/.img).
std::vector<uint8_t> nifti1_header(const NiftiSpec& spec, bool single_file = true);
// `bytes` into `path` (gzipped when it ends in .gz).
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

// A single-file NIfTI-1 (.nii or .nii.gz) holding `values` (i fastest).
void write_nifti1(const std::string& path, const NiftiSpec& spec, const std::vector<double>& values);
// A NIfTI-1 pair: header at hdr_path, data at img_path.
void write_nifti1_pair(const std::string& hdr_path, const std::string& img_path, const NiftiSpec& spec,
                       const std::vector<double>& values);
// The same through the NIfTI library: version 1 or 2, native byte order (spec.big_endian
// is ignored).
void write_nifti_with_library(const std::string& path, const NiftiSpec& spec, const std::vector<double>& values,
                              int nifti_version);

}  // namespace gridnn::test
