// read_nifti_volume (models/data/nifti_volume.h): values of every datatype in both byte
// orders, gzip, scaling, NIfTI-2 and .hdr/.img files, the axis mapping, the errors, and
// mricron's ch2bet.nii.gz against the NIfTI library's own read.
#include <gtest/gtest.h>
#include <nifti2_io.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "models/data/nifti_volume.h"
#include "test/models/data/data_test_support.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

using data::read_nifti_volume;
using test::contains;
using test::error_message;
using test::NiftiSpec;

constexpr int64_t kW = 4, kH = 3, kD = 2;  // dim[1], dim[2], dim[3]

// A value for voxel (i, j, k) that fits every datatype (0..127) and differs per voxel.
double voxel_value(int64_t i, int64_t j, int64_t k) { return double(i + 5 * j + 17 * k) + 60.0; }

std::vector<double> file_order_values(double (*f)(int64_t, int64_t, int64_t)) {
  std::vector<double> v;  // i fastest, then j, then k: the file's order
  for (int64_t k = 0; k < kD; ++k)
    for (int64_t j = 0; j < kH; ++j)
      for (int64_t i = 0; i < kW; ++i) v.push_back(f(i, j, k));
  return v;
}

// Checks out[k][j][i] == expected(i, j, k) for the [D, H, W] = [kD, kH, kW] volume.
void expect_volume(const Tensor& volume, double (*expected)(int64_t, int64_t, int64_t), double scale = 1.0,
                   double offset = 0.0) {
  ASSERT_EQ(volume.shape(), Shape({kD, kH, kW}));
  const float* x = volume.data<float>();
  for (int64_t k = 0; k < kD; ++k)
    for (int64_t j = 0; j < kH; ++j)
      for (int64_t i = 0; i < kW; ++i)
        EXPECT_EQ(x[(k * kH + j) * kW + i], float(expected(i, j, k) * scale + offset))
            << "i=" << i << " j=" << j << " k=" << k;
}

NiftiSpec spec_of(int datatype, bool big_endian = false) {
  NiftiSpec spec;
  spec.dims = {kW, kH, kD};
  spec.datatype = datatype;
  spec.big_endian = big_endian;
  return spec;
}

class NiftiVolume : public test::ScratchDirTest {};

// ---- values ------------------------------------------------------------------------------

struct DatatypeCase {
  int datatype;
  bool big_endian;
  const char* file;
};

// "INT16_big_gz": the datatype's name without NIFTI_TYPE_, the byte order, gzip or not.
std::string case_name(const DatatypeCase& c) {
  return std::string(nifti_datatype_to_string(c.datatype)).substr(11) + (c.big_endian ? "_big" : "_little") +
         (std::string(c.file).size() > 5 ? "_gz" : "");
}
void PrintTo(const DatatypeCase& c, std::ostream* os) { *os << case_name(c); }

class NiftiDatatypes : public test::ScratchDirTest, public ::testing::WithParamInterface<DatatypeCase> {};

TEST_P(NiftiDatatypes, RoundTripInBothByteOrders) {
  const DatatypeCase c = GetParam();
  const std::string file = path(c.file);
  test::write_nifti1(file, spec_of(c.datatype, c.big_endian), file_order_values(voxel_value));
  expect_volume(read_nifti_volume(file), voxel_value);
}

std::vector<DatatypeCase> datatype_cases() {
  std::vector<DatatypeCase> cases;
  for (int dt : {NIFTI_TYPE_UINT8, NIFTI_TYPE_INT8, NIFTI_TYPE_INT16, NIFTI_TYPE_UINT16, NIFTI_TYPE_INT32,
                 NIFTI_TYPE_UINT32, NIFTI_TYPE_INT64, NIFTI_TYPE_UINT64, NIFTI_TYPE_FLOAT32, NIFTI_TYPE_FLOAT64})
    for (bool big : {false, true})
      for (const char* file : {"v.nii", "v.nii.gz"}) cases.push_back({dt, big, file});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, NiftiDatatypes, ::testing::ValuesIn(datatype_cases()),
                         [](const auto& test_info) { return case_name(test_info.param); });

// Values whose bytes differ, negative ones and the types' extremes: a missing or doubled
// byte swap cannot go unnoticed.
TEST_F(NiftiVolume, ByteSwapOfWideValues) {
  const std::vector<double> values = {258, -300, 32767, -32768, 1, -1, 0x1234, -0x1234, 0x7f00, 513, -2, 4660,
                                      100, -100, 3,     -3,     7, 8,  9,      10,      11,     12,  13, 14};
  for (bool big : {false, true}) {
    const std::string file = path(big ? "big.nii" : "little.nii");
    test::write_nifti1(file, spec_of(NIFTI_TYPE_INT16, big), values);
    const std::vector<float> got = read_nifti_volume(file).to_vector<float>();
    ASSERT_EQ(got.size(), values.size());
    for (size_t v = 0; v < values.size(); ++v) EXPECT_EQ(got[v], float(values[v])) << v;
  }
  const std::vector<double> wide = {1.5e-7, -2.25e9, 3.0e30, -7.0, 0.1, 65536.5, 1e-30, 2,  3,  4,  5,  6,
                                    7,      8,       9,      10,   11,  12,      13,    14, 15, 16, 17, 18};
  test::write_nifti1(path("big64.nii"), spec_of(NIFTI_TYPE_FLOAT64, true), wide);
  const std::vector<float> got = read_nifti_volume(path("big64.nii")).to_vector<float>();
  for (size_t v = 0; v < wide.size(); ++v) EXPECT_EQ(got[v], float(wide[v])) << v;
}

TEST_F(NiftiVolume, ScalingFollowsTheNiftiRule) {
  NiftiSpec spec = spec_of(NIFTI_TYPE_INT16);
  spec.scl_slope = 0.5f;
  spec.scl_inter = -3.0f;
  test::write_nifti1(path("scaled.nii.gz"), spec, file_order_values(voxel_value));
  expect_volume(read_nifti_volume(path("scaled.nii.gz")), voxel_value, 0.5, -3.0);

  spec.scl_slope = 0.0f;  // slope 0: not scaled, the intercept is ignored too
  spec.scl_inter = 7.0f;
  test::write_nifti1(path("unscaled.nii"), spec, file_order_values(voxel_value));
  expect_volume(read_nifti_volume(path("unscaled.nii")), voxel_value);

  spec.scl_slope = std::numeric_limits<float>::infinity();  // not finite: not scaled
  test::write_nifti1(path("inf_slope.nii"), spec, file_order_values(voxel_value));
  expect_volume(read_nifti_volume(path("inf_slope.nii")), voxel_value);
}

TEST_F(NiftiVolume, FilesWrittenByTheLibraryNifti1AndNifti2) {
  for (int version : {1, 2})
    for (const char* name : {"lib.nii", "lib.nii.gz"}) {
      const std::string file = path(std::to_string(version) + name);
      NiftiSpec spec = spec_of(NIFTI_TYPE_FLOAT64);
      spec.scl_slope = 2.0f;
      spec.scl_inter = 1.0f;
      test::write_nifti_with_library(file, spec, file_order_values(voxel_value), version);
      if (std::string(name) == "lib.nii") {  // the header really is that version
        int32_t sizeof_hdr = 0;
        std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(&sizeof_hdr), 4);
        EXPECT_EQ(sizeof_hdr, version == 2 ? 540 : 348);
      }
      expect_volume(read_nifti_volume(file), voxel_value, 2.0, 1.0);
    }
}

TEST_F(NiftiVolume, HeaderAndImagePair) {
  for (bool big : {false, true}) {
    const std::string hdr = path(big ? "b.hdr" : "l.hdr"), img = path(big ? "b.img" : "l.img");
    test::write_nifti1_pair(hdr, img, spec_of(NIFTI_TYPE_UINT16, big), file_order_values(voxel_value));
    expect_volume(read_nifti_volume(hdr), voxel_value);
  }
}

TEST_F(NiftiVolume, TrailingDimensionsOfSizeOneAreOneVolume) {
  NiftiSpec spec = spec_of(NIFTI_TYPE_FLOAT32);
  spec.dims = {kW, kH, kD, 1, 1};
  test::write_nifti1(path("5d.nii"), spec, file_order_values(voxel_value));
  expect_volume(read_nifti_volume(path("5d.nii")), voxel_value);
}

// ---- errors ------------------------------------------------------------------------------

TEST_F(NiftiVolume, FourDimensionalFileIsRejected) {
  NiftiSpec spec = spec_of(NIFTI_TYPE_FLOAT32);
  spec.dims = {kW, kH, kD, 3};
  const std::string file = path("4d.nii.gz");
  test::write_nifti1(file, spec, std::vector<double>(size_t(kW * kH * kD * 3), 1.0));
  const std::string message = error_message([&] { read_nifti_volume(file); });
  EXPECT_TRUE(contains(message, file + " is 4-D (3 volumes); gridnn needs one 3-D volume per file"));
}

TEST_F(NiftiVolume, TwoDimensionalFileIsRejected) {
  NiftiSpec spec = spec_of(NIFTI_TYPE_UINT8);
  spec.dims = {kW, kH};
  test::write_nifti1(path("2d.nii"), spec, std::vector<double>(size_t(kW * kH), 1.0));
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("2d.nii")); }),
                       path("2d.nii") + " is 2-D; gridnn needs one 3-D volume per file"));
}

TEST_F(NiftiVolume, MissingFile) {
  const std::string file = path("absent.nii.gz");
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(file); }), file + ": no such file"));
}

TEST_F(NiftiVolume, TruncatedData) {
  const std::string file = path("short.nii");
  test::write_nifti1(file, spec_of(NIFTI_TYPE_INT32), file_order_values(voxel_value));
  std::filesystem::resize_file(file, 352 + 4 * 10);  // 10 of 24 voxels left
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(file); }),
                       file +
                           ": truncated: the header declares 4x3x2 voxels of INT32 (code "
                           "8) (96 bytes from byte 352 of " +
                           file + ") but only 40 bytes are there"));

  // A gzipped file whose header claims more data than it holds.
  std::vector<uint8_t> bytes = test::nifti1_header(spec_of(NIFTI_TYPE_INT32));
  bytes.resize(bytes.size() + 8, 0);
  test::write_bytes(path("short.nii.gz"), bytes);
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("short.nii.gz")); }), "but only 8 bytes are there"));

  // A header cut short: the library cannot read it.
  std::filesystem::resize_file(file, 200);
  EXPECT_TRUE(
      contains(error_message([&] { read_nifti_volume(file); }), file + ": the NIfTI library cannot read its header"));
}

TEST_F(NiftiVolume, GarbageHeader) {
  const std::string file = path("garbage.nii");
  write_text(file, std::string(400, 'x'));
  EXPECT_TRUE(
      contains(error_message([&] { read_nifti_volume(file); }), file + ": the NIfTI library cannot read its header"));
  write_text(path("empty.nii"), "");
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("empty.nii")); }),
                       path("empty.nii") + ": the NIfTI library cannot read its header"));
}

TEST_F(NiftiVolume, InconsistentByteOrderIsRejected) {
  // sizeof_hdr byte-swapped, every other field in native order: the library would swap the
  // whole header by one rule while dim[0] says not to (a fuzzed NIfTI-2 header of this kind,
  // now test/fuzz/corpus_nifti/byte_order_conflict, overflowed the library's stack).
  std::vector<uint8_t> bytes = test::nifti1_header(spec_of(NIFTI_TYPE_UINT8));
  std::reverse(bytes.begin(), bytes.begin() + 4);
  bytes.resize(bytes.size() + size_t(kW * kH * kD), 1);
  test::write_bytes(path("order.nii"), bytes);
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("order.nii")); }),
                       path("order.nii") + ": the header's byte order is inconsistent"));
}

TEST_F(NiftiVolume, UnsupportedDatatypes) {
  const std::vector<double> values(size_t(kW * kH * kD), 1.0);
  for (auto [datatype, name] : {std::pair{NIFTI_TYPE_COMPLEX64, "COMPLEX64 (code 32)"},
                                std::pair{NIFTI_TYPE_RGB24, "RGB24 (code 128)"}, std::pair{9999, "(code 9999)"}}) {
    const std::string file = path("type" + std::to_string(datatype) + ".nii");
    test::write_nifti1(file, spec_of(datatype), values);
    const std::string message = error_message([&] { read_nifti_volume(file); });
    EXPECT_TRUE(contains(message, file + ": datatype "));
    EXPECT_TRUE(contains(message, std::string(name) + " is not supported"));
  }
}

TEST_F(NiftiVolume, NonPositiveDimsAndDamagedDimCount) {
  for (bool big : {false, true}) {
    NiftiSpec spec = spec_of(NIFTI_TYPE_UINT8, big);
    spec.dims = {kW, 0, kD};
    test::write_nifti1(path("zero.nii.gz"), spec, {});
    EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("zero.nii.gz")); }),
                         path("zero.nii.gz") + ": dim[2] = 0; every dimension must be at least 1"));
    spec.dims = {kW, kH, -4};
    test::write_nifti1(path("negative.nii"), spec, {});
    EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("negative.nii")); }),
                         path("negative.nii") + ": dim[3] = -4"));
  }
  std::vector<uint8_t> bytes = test::nifti1_header(spec_of(NIFTI_TYPE_UINT8));
  bytes[40] = 9;  // dim[0] = 9, and 9 << 8 swapped: no byte order makes it 1..7
  bytes.resize(bytes.size() + 24, 1);
  test::write_bytes(path("ndim.nii"), bytes);
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("ndim.nii")); }),
                       path("ndim.nii") + ": dim[0] = 9 is not a number of dimensions"));
}

TEST_F(NiftiVolume, NonFiniteVoxels) {
  std::vector<double> values = file_order_values(voxel_value);
  values[5] = std::nan("");  // voxel i=1, j=1, k=0
  test::write_nifti1(path("nan.nii"), spec_of(NIFTI_TYPE_FLOAT32), values);
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("nan.nii")); }),
                       path("nan.nii") + ": voxel (i=1, j=1, k=0) is nan"));

  values[5] = 1e300;  // finite in the file, infinite as f32
  test::write_nifti1(path("huge.nii"), spec_of(NIFTI_TYPE_FLOAT64), values);
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("huge.nii")); }),
                       path("huge.nii") + ": voxel (i=1, j=1, k=0) is 1e+300"));

  NiftiSpec spec = spec_of(NIFTI_TYPE_INT16);  // overflow through the scaling
  spec.scl_slope = 1e37f;
  test::write_nifti1(path("scaled.nii"), spec, file_order_values(voxel_value));
  EXPECT_TRUE(contains(error_message([&] { read_nifti_volume(path("scaled.nii")); }),
                       "scaled by the header's scl_slope/scl_inter"));
}

// ---- a real brain --------------------------------------------------------------------------

struct ImageDeleter {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};

TEST(NiftiRealVolume, Ch2betMatchesTheLibrarysRead) {
  const std::string file = "/usr/share/mricron/templates/ch2bet.nii.gz";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << file << " absent (Debian's mricron-data)";
  const Tensor volume = read_nifti_volume(file);
  ASSERT_EQ(volume.shape(), Shape({181, 217, 181}));  // dim = 181 x 217 x 181 (i, j, k)

  // The library's own whole-file read, indexed as NIfTI defines: i + nx * (j + ny * k).
  std::unique_ptr<nifti_image, ImageDeleter> nim(nifti_image_read(file.c_str(), 1));
  ASSERT_NE(nim, nullptr);
  ASSERT_EQ(nim->datatype, NIFTI_TYPE_UINT8) << "the reference below reads uint8";
  const auto* ref = static_cast<const uint8_t*>(nim->data);
  const bool scaled = nim->scl_slope != 0.0;
  const float* x = volume.data<float>();
  int64_t mismatches = 0, nonzero = 0;
  for (int64_t k = 0; k < 181; ++k)
    for (int64_t j = 0; j < 217; ++j)
      for (int64_t i = 0; i < 181; ++i) {
        const double stored = ref[i + 181 * (j + 217 * k)];
        const float expected = float(scaled ? stored * nim->scl_slope + nim->scl_inter : stored);
        const float got = x[(k * 217 + j) * 181 + i];
        mismatches += got != expected;
        nonzero += got != 0.0f;
      }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(nonzero, 181 * 217 * 181 / 10);  // a brain, not an empty box
}

}  // namespace
}  // namespace gridnn
