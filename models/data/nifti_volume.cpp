#include "models/data/nifti_volume.h"

#include <nifti2_io.h>
#include <znzlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace gridnn::data {
namespace {

struct ImageDeleter {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using ImagePtr = std::unique_ptr<nifti_image, ImageDeleter>;

// An open znz stream (plain or gzip), closed on every path.
class DataFile {
 public:
  DataFile(const char* path, bool gzipped) : file_(znzopen(path, "rb", gzipped ? 1 : 0)) {}
  ~DataFile() {
    if (!znz_isnull(file_)) znzclose(file_);
  }
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  bool is_open() const { return !znz_isnull(file_); }
  znzFile get() const { return file_; }

 private:
  znzFile file_;
};

// The library prints its own diagnostics on stderr at debug level 1 (its default); our
// messages say more, so it is silenced once, before the first read. The level is the only
// library global a read touches.
void quiet_nifti_library() {
  static std::once_flag once;
  std::call_once(once, [] { nifti_set_debug_level(0); });
}

// Bytes per voxel of the datatypes gridnn reads; 0 for the others.
int bytes_per_voxel(int datatype) {
  switch (datatype) {
    case NIFTI_TYPE_UINT8:
    case NIFTI_TYPE_INT8:
      return 1;
    case NIFTI_TYPE_INT16:
    case NIFTI_TYPE_UINT16:
      return 2;
    case NIFTI_TYPE_INT32:
    case NIFTI_TYPE_UINT32:
    case NIFTI_TYPE_FLOAT32:
      return 4;
    case NIFTI_TYPE_INT64:
    case NIFTI_TYPE_UINT64:
    case NIFTI_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

std::string datatype_name(int datatype) {
  const char* name = nifti_datatype_to_string(datatype);  // "NIFTI_TYPE_INT16"
  std::string s = name ? name : "UNKNOWN";
  if (s.rfind("NIFTI_TYPE_", 0) == 0) s = s.substr(11);
  return s + " (code " + std::to_string(datatype) + ")";
}

template <class T>
double stored_value(const uint8_t* data, int64_t v) {
  T value;
  std::memcpy(&value, data + v * int64_t(sizeof(T)), sizeof(T));
  return double(value);
}

double stored_value(int datatype, const uint8_t* data, int64_t v) {
  switch (datatype) {
    case NIFTI_TYPE_UINT8:
      return stored_value<uint8_t>(data, v);
    case NIFTI_TYPE_INT8:
      return stored_value<int8_t>(data, v);
    case NIFTI_TYPE_INT16:
      return stored_value<int16_t>(data, v);
    case NIFTI_TYPE_UINT16:
      return stored_value<uint16_t>(data, v);
    case NIFTI_TYPE_INT32:
      return stored_value<int32_t>(data, v);
    case NIFTI_TYPE_UINT32:
      return stored_value<uint32_t>(data, v);
    case NIFTI_TYPE_INT64:
      return stored_value<int64_t>(data, v);
    case NIFTI_TYPE_UINT64:
      return stored_value<uint64_t>(data, v);
    case NIFTI_TYPE_FLOAT32:
      return stored_value<float>(data, v);
    default:
      return stored_value<double>(data, v);  // FLOAT64, the only one left
  }
}

// The dims and datatype as the file stores them. nifti_image_read silently turns dims
// below 1 into 1 and refuses unknown datatypes without saying why, so these two are
// checked on the raw header first (NIfTI-1 or NIfTI-2, swapped to our byte order when its
// dim[0] is plausible only swapped, as the standard prescribes).
struct StoredHeader {
  int64_t dim[8];
  int datatype;
};

// The byte order is told twice: by sizeof_hdr (348 or 540 in the file's order) and by dim[0]
// (1 to 7 in the file's order). The library decides by one or the other depending on the
// version, so a header where the two disagree would be read with dims we never checked: it
// is refused as damaged (a fuzzed NIfTI-2 header of this kind overflowed the library's stack).
template <class Header>
StoredHeader stored_header(Header* h, int version, const std::string& path) {
  auto plausible = [](int64_t ndim) { return ndim >= 1 && ndim <= 7; };
  const int expected_size = version == 1 ? 348 : 540;
  auto size_swapped = h->sizeof_hdr;
  nifti_swap_Nbytes(1, int(sizeof(size_swapped)), &size_swapped);
  auto dim0_swapped = h->dim[0];
  nifti_swap_Nbytes(1, int(sizeof(dim0_swapped)), &dim0_swapped);
  const bool size_says_swapped = h->sizeof_hdr != expected_size && size_swapped == expected_size;
  const bool dim_says_swapped = !plausible(h->dim[0]) && plausible(dim0_swapped);
  GRIDNN_REQUIRE(size_says_swapped == dim_says_swapped, path, ": the header's byte order is inconsistent (sizeof_hdr ",
                 size_says_swapped ? "is" : "is not", " byte-swapped, dim[0] ", dim_says_swapped ? "is" : "is not",
                 "); the header is damaged");
  if (size_says_swapped) swap_nifti_header(h, version);
  StoredHeader stored;
  for (int d = 0; d < 8; ++d) stored.dim[d] = int64_t(h->dim[d]);
  stored.datatype = h->datatype;
  return stored;
}

void check_stored_header(const std::string& path) {
  int version = 0;
  std::unique_ptr<void, decltype(&std::free)> raw(
      nifti_read_header(path.c_str(), &version, /*check=*/0), &std::free);
  GRIDNN_REQUIRE(raw != nullptr && (version == 1 || version == 2), path,
                 ": the NIfTI library cannot read its header (not a NIfTI-1, NIfTI-2 or "
                 "Analyze file, or a truncated header); inspect it with `nifti_tool "
                 "-disp_hdr -infiles ",
                 path, "`");
  const StoredHeader h = version == 1 ? stored_header(static_cast<nifti_1_header*>(raw.get()), 1, path)
                                      : stored_header(static_cast<nifti_2_header*>(raw.get()), 2, path);
  const int64_t ndim = h.dim[0];
  GRIDNN_REQUIRE(ndim >= 1 && ndim <= 7, path, ": dim[0] = ", ndim,
                 " is not a number of dimensions (1 to 7); the header is damaged");
  for (int64_t d = 1; d <= ndim; ++d)
    GRIDNN_REQUIRE(h.dim[d] > 0, path, ": dim[", d, "] = ", h.dim[d],
                   "; every dimension must be at least 1 (the header is damaged)");
  GRIDNN_REQUIRE(
      bytes_per_voxel(h.datatype) > 0, path, ": datatype ", datatype_name(h.datatype),
      " is not supported; gridnn reads uint8, int8, int16, uint16, int32, uint32, "
      "int64, uint64, float32 and float64 (convert it, e.g. fslmaths in out -odt float)");
}

ImagePtr read_header(const std::string& path) {
  std::error_code ec;
  GRIDNN_REQUIRE(std::filesystem::is_regular_file(path, ec), path,
                 ": no such file; check the path (relative manifest paths are resolved "
                 "against the manifest's folder)");
  check_stored_header(path);
  ImagePtr nim(nifti_image_read(path.c_str(), /*read_data=*/0));
  GRIDNN_REQUIRE(nim != nullptr, path,
                 ": the NIfTI library cannot read its header (a damaged header, or a .hdr "
                 "whose .img is missing); inspect it with `nifti_tool -disp_hdr -infiles ",
                 path, "`");
  return nim;
}

// Checks that the header describes one 3-D volume of a datatype gridnn reads.
void check_header(const std::string& path, const nifti_image& nim) {
  const int64_t ndim = nim.dim[0];
  GRIDNN_REQUIRE(ndim >= 3, path, " is ", ndim,
                 "-D; gridnn needs one 3-D volume per file (dim[0] = 3)");
  int64_t volumes = 1;
  for (int64_t d = 4; d <= ndim; ++d) {
    GRIDNN_REQUIRE(nim.dim[d] > 0 && nim.dim[d] <= std::numeric_limits<int64_t>::max() / volumes,
                   path, ": dims overflow");
    volumes *= nim.dim[d];
  }
  GRIDNN_REQUIRE(volumes == 1, path, " is ", ndim, "-D (", volumes,
                 " volumes); gridnn needs one 3-D volume per file: split it (e.g. fslsplit) "
                 "and list each volume in the manifest");
  GRIDNN_REQUIRE(nim.dim[1] > 0 && nim.dim[2] > 0 && nim.dim[3] > 0, path, ": dims ", nim.dim[1],
                 "x", nim.dim[2], "x", nim.dim[3], " must be positive");
  GRIDNN_REQUIRE(bytes_per_voxel(nim.datatype) > 0, path, ": datatype ",
                 datatype_name(nim.datatype), " is not supported");
  GRIDNN_REQUIRE(nim.iname != nullptr && nim.iname_offset >= 0, path,
                 ": the header gives no usable data location (vox_offset ", nim.iname_offset, ")");
}

// The raw voxel bytes in the machine's byte order. Read in chunks, so a header that
// claims more data than the file holds fails with "truncated" instead of allocating it.
std::vector<uint8_t> read_voxel_bytes(const std::string& path, const nifti_image& nim,
                                      int64_t voxels, int voxel_bytes) {
  GRIDNN_REQUIRE(voxels <= std::numeric_limits<int64_t>::max() / voxel_bytes, path,
                 ": dims overflow");
  const int64_t needed = voxels * voxel_bytes;
  DataFile file(nim.iname, nifti_is_gzfile(nim.iname) != 0);
  GRIDNN_REQUIRE(file.is_open(), path, ": cannot open its data file ", nim.iname);
  if (nim.iname_offset > 0) {
    GRIDNN_REQUIRE(znzseek(file.get(), znz_off_t(nim.iname_offset), SEEK_SET) >= 0, path,
                   ": truncated: its data should start at byte ", nim.iname_offset,
                   " but the file is shorter; re-export or re-copy it");
  }
  constexpr int64_t kChunk = int64_t(1) << 22;
  std::vector<uint8_t> bytes;
  int64_t got = 0;
  while (got < needed) {
    const int64_t want = std::min(kChunk, needed - got);
    bytes.resize(size_t(got + want));
    const size_t n = znzread(bytes.data() + got, 1, size_t(want), file.get());
    got += int64_t(n);
    if (int64_t(n) < want) break;
  }
  GRIDNN_REQUIRE(got == needed, path, ": truncated: the header declares ", nim.nx, "x", nim.ny, "x",
                 nim.nz, " voxels of ", datatype_name(nim.datatype), " (", needed,
                 " bytes from byte ", nim.iname_offset, " of ", nim.iname, ") but only ", got,
                 " bytes are there; re-export or re-copy the file");
  if (voxel_bytes > 1 && nim.byteorder != nifti_short_order())
    nifti_swap_Nbytes(voxels, voxel_bytes, bytes.data());
  return bytes;
}

}  // namespace

Tensor read_nifti_volume(const std::string& path) {
  quiet_nifti_library();
  ImagePtr nim = read_header(path);
  check_header(path, *nim);
  const int64_t depth = nim->dim[3], height = nim->dim[2], width = nim->dim[1];
  GRIDNN_REQUIRE(height <= std::numeric_limits<int64_t>::max() / width &&
                     depth <= std::numeric_limits<int64_t>::max() / (height * width),
                 path, ": dims overflow");
  const int64_t voxels = depth * height * width;
  const int voxel_bytes = bytes_per_voxel(nim->datatype);
  const std::vector<uint8_t> bytes = read_voxel_bytes(path, *nim, voxels, voxel_bytes);

  const double slope = nim->scl_slope, inter = nim->scl_inter;
  const bool scaled = slope != 0.0 && std::isfinite(slope);
  GRIDNN_REQUIRE(!scaled || std::isfinite(inter), path, ": scl_inter = ", inter,
                 " is not finite; fix the header's scaling (scl_slope, scl_inter)");
  Tensor volume = Tensor::empty({depth, height, width});
  float* out = volume.data<float>();
  for (int64_t v = 0; v < voxels; ++v) {
    const double stored = stored_value(nim->datatype, bytes.data(), v);
    const double value = scaled ? stored * slope + inter : stored;
    // Also rejects what f32 cannot hold (converting it would be undefined behaviour).
    if (!(std::fabs(value) <= double(std::numeric_limits<float>::max()))) {
      const int64_t i = v % width, j = (v / width) % height, k = v / (width * height);
      throw Error(detail::concat(
          path, ": voxel (i=", i, ", j=", j, ", k=", k, ") is ", value, " (stored ", stored,
          scaled ? ", scaled by the header's scl_slope/scl_inter" : "",
          "); gridnn needs finite f32 values: replace non-finite voxels (e.g. fslmaths in "
          "-nan out) or fix the scaling"));
    }
    out[v] = float(value);
  }
  return volume;
}

}  // namespace gridnn::data
