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
  int version = 1;     // 1 (NIfTI-1 or Analyze 7.5) or 2
  bool nifti = false;  // a NIfTI magic ("n+1", "ni1", "n+2", "ni2"); else Analyze: no codes
  int64_t dim[8];
  int datatype;
  // Geometry as stored (float32 in NIfTI-1, promoted exactly; double in NIfTI-2).
  int qform_code = 0, sform_code = 0;
  double pixdim[8];
  double quatern[3], qoffset[3];
  double srow[3][4];
  std::vector<uint8_t> raw;  // the header in the machine's byte order (348 or 540 bytes)
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
  stored.version = version;
  stored.nifti = version == 2 ? std::memcmp(h->magic, "n+2", 4) == 0 || std::memcmp(h->magic, "ni2", 4) == 0
                              : std::memcmp(h->magic, "n+1", 4) == 0 || std::memcmp(h->magic, "ni1", 4) == 0;
  for (int d = 0; d < 8; ++d) stored.dim[d] = int64_t(h->dim[d]);
  stored.datatype = h->datatype;
  stored.qform_code = h->qform_code;
  stored.sform_code = h->sform_code;
  for (int d = 0; d < 8; ++d) stored.pixdim[d] = double(h->pixdim[d]);
  stored.quatern[0] = double(h->quatern_b);
  stored.quatern[1] = double(h->quatern_c);
  stored.quatern[2] = double(h->quatern_d);
  stored.qoffset[0] = double(h->qoffset_x);
  stored.qoffset[1] = double(h->qoffset_y);
  stored.qoffset[2] = double(h->qoffset_z);
  for (int c = 0; c < 4; ++c) {
    stored.srow[0][c] = double(h->srow_x[c]);
    stored.srow[1][c] = double(h->srow_y[c]);
    stored.srow[2][c] = double(h->srow_z[c]);
  }
  stored.raw.resize(sizeof(Header));
  std::memcpy(stored.raw.data(), h, sizeof(Header));
  return stored;
}

StoredHeader check_stored_header(const std::string& path) {
  int version = 0;
  std::unique_ptr<void, decltype(&std::free)> raw(nifti_read_header(path.c_str(), &version, /*check=*/0), &std::free);
  GRIDNN_REQUIRE(raw != nullptr && (version == 1 || version == 2), path,
                 ": the NIfTI library cannot read its header (not a NIfTI-1, NIfTI-2 or "
                 "Analyze file, or a truncated header); inspect it with `nifti_tool "
                 "-disp_hdr -infiles ",
                 path, "`");
  StoredHeader h = version == 1 ? stored_header(static_cast<nifti_1_header*>(raw.get()), 1, path)
                                : stored_header(static_cast<nifti_2_header*>(raw.get()), 2, path);
  const int64_t ndim = h.dim[0];
  GRIDNN_REQUIRE(ndim >= 1 && ndim <= 7, path, ": dim[0] = ", ndim,
                 " is not a number of dimensions (1 to 7); the header is damaged");
  for (int64_t d = 1; d <= ndim; ++d)
    GRIDNN_REQUIRE(h.dim[d] > 0, path, ": dim[", d, "] = ", h.dim[d],
                   "; every dimension must be at least 1 (the header is damaged)");
  GRIDNN_REQUIRE(bytes_per_voxel(h.datatype) > 0, path, ": datatype ", datatype_name(h.datatype),
                 " is not supported; gridnn reads uint8, int8, int16, uint16, int32, uint32, "
                 "int64, uint64, float32 and float64 (convert it, e.g. fslmaths in out -odt float)");
  return h;
}

ImagePtr read_header(const std::string& path, StoredHeader* stored = nullptr) {
  std::error_code ec;
  GRIDNN_REQUIRE(std::filesystem::is_regular_file(path, ec), path,
                 ": no such file; check the path (relative manifest paths are resolved "
                 "against the manifest's folder)");
  StoredHeader h = check_stored_header(path);
  if (stored) *stored = std::move(h);
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
  GRIDNN_REQUIRE(ndim >= 3, path, " is ", ndim, "-D; gridnn needs one 3-D volume per file (dim[0] = 3)");
  int64_t volumes = 1;
  for (int64_t d = 4; d <= ndim; ++d) {
    GRIDNN_REQUIRE(nim.dim[d] > 0 && nim.dim[d] <= std::numeric_limits<int64_t>::max() / volumes, path,
                   ": dims overflow");
    volumes *= nim.dim[d];
  }
  GRIDNN_REQUIRE(volumes == 1, path, " is ", ndim, "-D (", volumes,
                 " volumes); gridnn needs one 3-D volume per file: split it (e.g. fslsplit) "
                 "and list each volume in the manifest");
  GRIDNN_REQUIRE(nim.dim[1] > 0 && nim.dim[2] > 0 && nim.dim[3] > 0, path, ": dims ", nim.dim[1], "x", nim.dim[2], "x",
                 nim.dim[3], " must be positive");
  GRIDNN_REQUIRE(bytes_per_voxel(nim.datatype) > 0, path, ": datatype ", datatype_name(nim.datatype),
                 " is not supported");
  GRIDNN_REQUIRE(nim.iname != nullptr && nim.iname_offset >= 0, path,
                 ": the header gives no usable data location (vox_offset ", nim.iname_offset, ")");
}

// The raw voxel bytes in the machine's byte order. Read in chunks, so a header that
// claims more data than the file holds fails with "truncated" instead of allocating it.
std::vector<uint8_t> read_voxel_bytes(const std::string& path, const nifti_image& nim, int64_t voxels,
                                      int voxel_bytes) {
  GRIDNN_REQUIRE(voxels <= std::numeric_limits<int64_t>::max() / voxel_bytes, path, ": dims overflow");
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
  GRIDNN_REQUIRE(got == needed, path, ": truncated: the header declares ", nim.nx, "x", nim.ny, "x", nim.nz,
                 " voxels of ", datatype_name(nim.datatype), " (", needed, " bytes from byte ", nim.iname_offset,
                 " of ", nim.iname, ") but only ", got, " bytes are there; re-export or re-copy the file");
  if (voxel_bytes > 1 && nim.byteorder != nifti_short_order()) nifti_swap_Nbytes(voxels, voxel_bytes, bytes.data());
  return bytes;
}

// nibabel's header fixes on load: pixdim[1..3] of 0 -> 1, negative -> |.| (and, as the NIfTI
// library does, non-finite -> 1).
double fixed_pixdim(double p) { return std::isfinite(p) && p != 0.0 ? std::fabs(p) : 1.0; }

// The affine as nibabel 5.0 computes it (orientation.h).
ScanGeometry geometry_of(const std::string& path, const StoredHeader& h) {
  ScanGeometry g;
  g.path = path;
  g.dims = {h.dim[3], h.dim[2], h.dim[1]};
  const double vox[3] = {fixed_pixdim(h.pixdim[1]), fixed_pixdim(h.pixdim[2]), fixed_pixdim(h.pixdim[3])};
  Affine a{};
  a[3][3] = 1.0;
  if (h.nifti && h.sform_code > 0) {
    g.source = AffineSource::sform;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) a[r][c] = h.srow[r][c];
  } else if (h.nifti && h.qform_code > 0) {
    g.source = AffineSource::qform;
    // fillpositive + quat2mat in numpy's longdouble, the order of operations as nibabel's.
    using LD = long double;
    const LD x = h.quatern[0], y = h.quatern[1], z = h.quatern[2];
    const LD w2 = LD(1.0) - ((x * x + y * y) + z * z);
    GRIDNN_REQUIRE(w2 >= LD(-3.0) * LD(std::numeric_limits<float>::epsilon()), path,
                   ": the qform quaternion (b, c, d) = (", double(x), ", ", double(y), ", ", double(z),
                   ") has a norm above 1; fix the header's qform");
    const LD w = w2 < 0 ? LD(0) : std::sqrt(w2);
    const LD nq = ((w * w + x * x) + y * y) + z * z;
    LD rot[3][3];
    if (nq < LD(std::numeric_limits<double>::epsilon())) {
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) rot[r][c] = r == c ? 1 : 0;
    } else {
      const LD s = LD(2.0) / nq;
      const LD X = x * s, Y = y * s, Z = z * s;
      const LD wX = w * X, wY = w * Y, wZ = w * Z;
      const LD xX = x * X, xY = x * Y, xZ = x * Z;
      const LD yY = y * Y, yZ = y * Z, zZ = z * Z;
      const LD m[3][3] = {{LD(1.0) - (yY + zZ), xY - wZ, xZ + wY},
                          {xY + wZ, LD(1.0) - (xX + zZ), yZ - wX},
                          {xZ - wY, yZ + wX, LD(1.0) - (xX + yY)}};
      std::memcpy(rot, m, sizeof(m));
    }
    const double qfac = h.pixdim[0] == -1.0 ? -1.0 : 1.0;
    const LD scale[3] = {vox[0], vox[1], vox[2] * qfac};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) a[r][c] = double(rot[r][c] * scale[c]);
      a[r][3] = h.qoffset[r];
    }
  } else {
    // nibabel's base affine: diag(-dx, dy, dz), centred on the volume (LAS).
    g.source = AffineSource::none;
    const double zooms[3] = {-vox[0], vox[1], vox[2]};
    for (int r = 0; r < 3; ++r) {
      a[r][r] = zooms[r];
      a[r][3] = -(double(h.dim[r + 1] - 1) / 2.0) * zooms[r];
    }
  }
  g.affine = a;
  for (int c = 0; c < 3; ++c) {
    double sum = 0.0;
    for (int r = 0; r < 3; ++r) sum += a[r][c] * a[r][c];
    g.zooms[size_t(c)] = sum > 0.0 ? std::sqrt(sum) : 1.0;
  }
  return g;
}

}  // namespace

Tensor read_nifti_volume(const std::string& path) { return read_nifti_volume(path, nullptr); }

ScanGeometry read_nifti_geometry(const std::string& path) {
  quiet_nifti_library();
  StoredHeader stored;
  ImagePtr nim = read_header(path, &stored);
  check_header(path, *nim);
  return geometry_of(path, stored);
}

Tensor read_nifti_volume(const std::string& path, ScanGeometry* geometry) {
  quiet_nifti_library();
  StoredHeader header;
  ImagePtr nim = read_header(path, &header);
  check_header(path, *nim);
  if (geometry) *geometry = geometry_of(path, header);
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
      throw Error(detail::concat(path, ": voxel (i=", i, ", j=", j, ", k=", k, ") is ", value, " (stored ", stored,
                                 scaled ? ", scaled by the header's scl_slope/scl_inter" : "",
                                 "); gridnn needs finite f32 values: replace non-finite voxels (e.g. fslmaths in "
                                 "-nan out) or fix the scaling"));
    }
    out[v] = float(value);
  }
  return volume;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The scan's header made the header of a single-file float32 volume: every geometry field
// kept as stored, the data fields set.
template <class Header>
void make_float_header(Header& h, bool nifti, const char* magic, size_t magic_size, double vox_offset) {
  h.dim[0] = 3;
  for (int d = 4; d < 8; ++d) h.dim[d] = 1;
  h.datatype = NIFTI_TYPE_FLOAT32;
  h.bitpix = 32;
  h.scl_slope = 1;
  h.scl_inter = 0;
  h.cal_min = 0;
  h.cal_max = 0;
  h.intent_code = 0;
  h.intent_p1 = h.intent_p2 = h.intent_p3 = 0;
  std::memset(h.intent_name, 0, sizeof(h.intent_name));
  h.vox_offset = vox_offset;
  std::memcpy(h.magic, magic, magic_size);
  if (!nifti) {  // Analyze 7.5: the bytes NIfTI reads as geometry are something else
    h.qform_code = h.sform_code = 0;
    h.quatern_b = h.quatern_c = h.quatern_d = 0;
    h.qoffset_x = h.qoffset_y = h.qoffset_z = 0;
    for (int c = 0; c < 4; ++c) h.srow_x[c] = h.srow_y[c] = h.srow_z[c] = 0;
    h.pixdim[0] = 1;
  }
}

// A single-file float32 NIfTI of `volume` with the stored header's geometry: the header
// (Header: nifti_1_header or nifti_2_header) made float, the 4 bytes after it 0 (no
// extensions), then the data in the machine's byte order, as the header (nifti_read_header
// gave it in the machine's order).
static_assert(sizeof(nifti_1_header) == 348 && sizeof(nifti_2_header) == 540, "NIfTI header layouts");
template <class Header>
std::vector<uint8_t> float_file(const StoredHeader& stored, const char* magic, size_t magic_bytes,
                                const Tensor& volume) {
  const size_t header_bytes = sizeof(Header), data_offset = header_bytes + 4;
  Header h;
  std::memcpy(&h, stored.raw.data(), header_bytes);
  make_float_header(h, stored.nifti, magic, magic_bytes, double(data_offset));
  h.sizeof_hdr = int(header_bytes);
  std::vector<uint8_t> file(data_offset + size_t(volume.numel()) * sizeof(float), 0);
  std::memcpy(file.data(), &h, header_bytes);
  std::memcpy(file.data() + data_offset, volume.data<float>(), size_t(volume.numel()) * sizeof(float));
  return file;
}

}  // namespace

void write_nifti_like(const std::string& out_path, const Tensor& volume, const std::string& scan_path) {
  quiet_nifti_library();
  GRIDNN_REQUIRE(ends_with(out_path, ".nii") || ends_with(out_path, ".nii.gz"), out_path,
                 ": the output must be a single-file NIfTI (.nii or .nii.gz)");
  StoredHeader stored;
  ImagePtr nim = read_header(scan_path, &stored);
  check_header(scan_path, *nim);
  const std::array<int64_t, 3> dims{stored.dim[3], stored.dim[2], stored.dim[1]};
  GRIDNN_REQUIRE(volume.defined() && volume.rank() == 3 && volume.dtype() == DType::f32 && volume.device().is_cpu(),
                 out_path, ": expected a CPU f32 volume [D, H, W] to write, got ",
                 volume.defined() ? volume.str() : std::string("an undefined tensor"));
  GRIDNN_REQUIRE(volume.size(0) == dims[0] && volume.size(1) == dims[1] && volume.size(2) == dims[2], out_path,
                 ": the volume is ", volume.size(0), "x", volume.size(1), "x", volume.size(2), " [D, H, W] but ",
                 scan_path, " stores ", dims[0], "x", dims[1], "x", dims[2],
                 " (map it to the scan's grid first: map_to_stored)");
  const std::vector<uint8_t> file = stored.version == 2
                                        ? float_file<nifti_2_header>(stored, "n+2\0\r\n\032\n", 8, volume)
                                        : float_file<nifti_1_header>(stored, "n+1", 4, volume);
  // Written beside the output and renamed over it, so a reader never sees half a file.
  const std::string temp = out_path + ".tmp";
  znzFile f = znzopen(temp.c_str(), "wb", ends_with(out_path, ".gz") ? 1 : 0);
  GRIDNN_REQUIRE(!znz_isnull(f), out_path, ": cannot open ", temp,
                 " for writing; check the folder exists and is writable");
  const size_t written = znzwrite(file.data(), 1, file.size(), f);
  const int closed = znzclose(f);
  if (written != file.size() || closed != 0 || std::rename(temp.c_str(), out_path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw Error(out_path + ": write failed (" + std::to_string(written) + " of " + std::to_string(file.size()) +
                " bytes written; disk full or not writable?)");
  }
}

}  // namespace gridnn::data
