#include "test/models/data/nifti_writer.h"

#include <nifti2_io.h>
#include <znzlib.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace gridnn::test {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bytes of a trivially copyable value in the requested byte order.
template <class T>
void put(std::vector<uint8_t>& out, size_t offset, T value, bool big_endian) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the machine is little-endian (x86, arm64)
  for (size_t b = 0; b < sizeof(T); ++b) out[offset + b] = big_endian ? bytes[sizeof(T) - 1 - b] : bytes[b];
}

template <class T>
void append_all(std::vector<uint8_t>& out, const std::vector<double>& values, bool big_endian) {
  const size_t start = out.size();
  out.resize(start + values.size() * sizeof(T));
  for (size_t v = 0; v < values.size(); ++v) put<T>(out, start + v * sizeof(T), static_cast<T>(values[v]), big_endian);
}

// The library's size for the codes it knows (COMPLEX64 and RGB24 included, which gridnn
// refuses); 4 for unknown codes: any size, the reader must reject them anyway.
int bytes_per_voxel(int datatype) {
  int bytes = 0, swap_size = 0;
  nifti_datatype_sizes(datatype, &bytes, &swap_size);
  return bytes > 0 ? bytes : 4;
}

}  // namespace

std::vector<uint8_t> encode_voxels(int datatype, const std::vector<double>& values, bool big_endian) {
  std::vector<uint8_t> out;
  switch (datatype) {
    case NIFTI_TYPE_UINT8:
      append_all<uint8_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_INT8:
      append_all<int8_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_INT16:
      append_all<int16_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_UINT16:
      append_all<uint16_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_INT32:
      append_all<int32_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_UINT32:
      append_all<uint32_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_INT64:
      append_all<int64_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_UINT64:
      append_all<uint64_t>(out, values, big_endian);
      break;
    case NIFTI_TYPE_FLOAT32:
      append_all<float>(out, values, big_endian);
      break;
    case NIFTI_TYPE_FLOAT64:
      append_all<double>(out, values, big_endian);
      break;
    default:
      out.assign(values.size() * size_t(bytes_per_voxel(datatype)), 0);
      break;
  }
  return out;
}

std::vector<uint8_t> nifti1_header(const NiftiSpec& spec, bool single_file) {
  if (spec.dims.empty() || spec.dims.size() > 7) throw std::invalid_argument("1 to 7 dims");
  const bool be = spec.big_endian;
  std::vector<uint8_t> h(single_file ? 352 : 348, 0);
  put<int32_t>(h, 0, 348, be);                         // sizeof_hdr
  h[38] = 'r';                                         // regular
  put<int16_t>(h, 40, int16_t(spec.dims.size()), be);  // dim[0]
  for (size_t d = 0; d < 7; ++d)                       // dim[1..7]; unused ones 1
    put<int16_t>(h, 42 + 2 * d, int16_t(d < spec.dims.size() ? spec.dims[d] : 1), be);
  put<int16_t>(h, 70, int16_t(spec.datatype), be);                       // datatype
  put<int16_t>(h, 72, int16_t(8 * bytes_per_voxel(spec.datatype)), be);  // bitpix
  for (size_t d = 0; d < 8; ++d) put<float>(h, 76 + 4 * d, 1.0f, be);    // pixdim (qfac 1)
  put<float>(h, 76, spec.qfac, be);
  for (size_t d = 0; d < 3; ++d) put<float>(h, 80 + 4 * d, spec.pixdim[d], be);
  put<int16_t>(h, 252, int16_t(spec.qform_code), be);
  put<int16_t>(h, 254, int16_t(spec.sform_code), be);
  for (size_t d = 0; d < 3; ++d) {
    put<float>(h, 256 + 4 * d, spec.quatern[d], be);
    put<float>(h, 268 + 4 * d, spec.qoffset[d], be);
  }
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 4; ++c) put<float>(h, 280 + 16 * r + 4 * c, spec.srow[r][c], be);
  put<float>(h, 108, single_file ? 352.0f : 0.0f, be);  // vox_offset
  put<float>(h, 112, spec.scl_slope, be);
  put<float>(h, 116, spec.scl_inter, be);
  std::memcpy(&h[344], single_file ? "n+1" : "ni1", 4);  // magic (with its NUL)
  return h;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  if (ends_with(path, ".gz")) {
    znzFile f = znzopen(path.c_str(), "wb", 1);
    if (znz_isnull(f)) throw std::runtime_error("cannot write " + path);
    const size_t n = znzwrite(bytes.data(), 1, bytes.size(), f);
    znzclose(f);
    if (n != bytes.size()) throw std::runtime_error("short write to " + path);
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_nifti1(const std::string& path, const NiftiSpec& spec, const std::vector<double>& values) {
  std::vector<uint8_t> file = nifti1_header(spec, /*single_file=*/true);
  const std::vector<uint8_t> data = encode_voxels(spec.datatype, values, spec.big_endian);
  file.insert(file.end(), data.begin(), data.end());
  write_bytes(path, file);
}

void write_nifti1_pair(const std::string& hdr_path, const std::string& img_path, const NiftiSpec& spec,
                       const std::vector<double>& values) {
  write_bytes(hdr_path, nifti1_header(spec, /*single_file=*/false));
  write_bytes(img_path, encode_voxels(spec.datatype, values, spec.big_endian));
}

void write_nifti_with_library(const std::string& path, const NiftiSpec& spec, const std::vector<double>& values,
                              int nifti_version) {
  int64_t dims[8] = {int64_t(spec.dims.size()), 1, 1, 1, 1, 1, 1, 1};
  for (size_t d = 0; d < spec.dims.size(); ++d) dims[d + 1] = spec.dims[d];
  nifti_image* nim = nifti_make_new_nim(dims, spec.datatype, /*data_fill=*/1);
  if (nim == nullptr) throw std::runtime_error("nifti_make_new_nim failed");
  const std::vector<uint8_t> data = encode_voxels(spec.datatype, values, /*big_endian=*/false);
  if (int64_t(data.size()) != nim->nvox * nim->nbyper) {
    nifti_image_free(nim);
    throw std::invalid_argument("values do not fill the dims");
  }
  std::memcpy(nim->data, data.data(), data.size());
  nim->scl_slope = spec.scl_slope;
  nim->scl_inter = spec.scl_inter;
  if (nifti_version == 1) {
    const int failed = nifti_set_filenames(nim, path.c_str(), /*check=*/0, /*set_byte_order=*/1);
    if (!failed) nifti_image_write(nim);
    nifti_image_free(nim);
    if (failed) throw std::runtime_error("nifti_set_filenames failed for " + path);
    return;
  }
  // NIfTI-2: nifti_image_write of this library version writes a .nii as NIfTI-1 whatever
  // nifti_type says, so the library only builds the 540-byte header here.
  nim->nifti_type = NIFTI_FTYPE_NIFTI2_1;
  nim->iname_offset = 544;  // header + the 4-byte extension flag
  nifti_2_header header;
  const int failed = nifti_convert_nim2n2hdr(nim, &header);
  nifti_image_free(nim);
  if (failed) throw std::runtime_error("nifti_convert_nim2n2hdr failed");
  std::vector<uint8_t> file(544, 0);
  std::memcpy(file.data(), &header, sizeof(header));
  file.insert(file.end(), data.begin(), data.end());
  write_bytes(path, file);
}

}  // namespace gridnn::test
