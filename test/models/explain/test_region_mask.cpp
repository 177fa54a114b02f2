// models/explain/region_mask.h: a mask stored like its scan (PIL, by the sform) lands on the
// network voxels of a box given in world millimetres, through a crop and a pad, against a
// plain loop over the canonical grid; it maps back onto the stored mask; the nearest stored
// voxel rounds half up; masks in another grid, 4-D and missing files are refused.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "models/data/nifti_dataset.h"
#include "models/data/nifti_volume.h"
#include "models/data/orientation.h"
#include "models/explain/region_mask.h"
#include "test/models/data/data_test_support.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

using test::contains;
using test::error_message;

// The canonical grid: x, y, z = 5, 6, 7 voxels of 1.5, 2, 2.5 mm; voxel (x, y, z) lies at
// world (1.5 x - 3, 2 y + 4, 2.5 z + 5) mm.
constexpr int64_t kX = 5, kY = 6, kZ = 7;
std::array<double, 3> canonical_world(int64_t x, int64_t y, int64_t z) {
  return {1.5 * double(x) - 3, 2.0 * double(y) + 4, 2.5 * double(z) + 5};
}

// Stored PIL: i runs to Posterior (y = 5 - i), j to Inferior (z = 6 - j), k to Left
// (x = 4 - k), so dims (i, j, k) = (6, 7, 5) and the tensor is [5, 7, 6]. Its sform:
// world = (3 - 1.5 k, 14 - 2 i, 20 - 2.5 j).
constexpr int64_t kNi = kY, kNj = kZ, kNk = kX;
const std::array<std::array<float, 4>, 3> kPilSform{{{0, 0, -1.5f, 3}, {-2, 0, 0, 14}, {0, -2.5f, 0, 20}}};

// The box, in world mm: canonical x 1..3, y 2..5, z 2..4.
bool in_box(const std::array<double, 3>& p) {
  return p[0] >= -1.6 && p[0] <= 1.6 && p[1] >= 7 && p[1] <= 15 && p[2] >= 9 && p[2] <= 16;
}

class RegionMaskTest : public test::ScratchDirTest {
 protected:
  // A NIfTI-1 file of dims {n_i, n_j, n_k, ...} with `sform` (code 2) and value(i, j, k).
  std::string write(const std::string& name, std::vector<int64_t> dims,
                    const std::array<std::array<float, 4>, 3>& sform, int datatype,
                    double (*value)(const std::array<std::array<float, 4>, 3>&, int64_t, int64_t, int64_t)) {
    test::NiftiSpec spec;
    spec.dims = dims;
    spec.datatype = datatype;
    spec.sform_code = 2;
    spec.srow = sform;
    int64_t volumes = 1;
    for (size_t a = 3; a < dims.size(); ++a) volumes *= dims[a];
    std::vector<double> values;
    for (int64_t v = 0; v < volumes; ++v)
      for (int64_t k = 0; k < dims[2]; ++k)
        for (int64_t j = 0; j < dims[1]; ++j)
          for (int64_t i = 0; i < dims[0]; ++i) values.push_back(value(sform, i, j, k));
    test::write_nifti1(path(name), spec, values);
    return path(name);
  }
  static double anatomy_value(const std::array<std::array<float, 4>, 3>&, int64_t i, int64_t j, int64_t k) {
    return double(1 + i + 10 * j + 100 * k);
  }
  // 3 where the voxel's centre (by the file's own sform) lies in the box, else 0.
  static double box_value(const std::array<std::array<float, 4>, 3>& s, int64_t i, int64_t j, int64_t k) {
    std::array<double, 3> p{};
    for (size_t r = 0; r < 3; ++r) p[r] = s[r][0] * double(i) + s[r][1] * double(j) + s[r][2] * double(k) + s[r][3];
    return in_box(p) ? 3.0 : 0.0;
  }
  data::Scan scan(const std::string& file, std::array<int64_t, 3> target) const {
    data::Manifest m;
    m.source = "test.csv";
    m.rows.push_back({file, 0, data::Split::unassigned, 2});
    data::NiftiDatasetOptions o;
    o.target = target;
    o.fit = data::Fit::crop;
    return data::NiftiDataset(m, o).load_scan(0);
  }
  std::string anatomy() { return write("scan.nii.gz", {kNi, kNj, kNk}, kPilSform, 16, anatomy_value); }
  std::string box_mask() { return write("mask.nii.gz", {kNi, kNj, kNk}, kPilSform, 4, box_value); }
};

TEST_F(RegionMaskTest, WorldBoxLandsOnItsNetworkVoxelsThroughCropAndPad) {
  const data::Scan s = scan(anatomy(), {9, 4, 8});
  ASSERT_EQ(s.stored.dims, (std::array<int64_t, 3>{kNk, kNj, kNi}));
  const Tensor region = explain::region_in_network_space(box_mask(), s);
  ASSERT_EQ(region.shape(), (Shape{9, 4, 8}));
  ASSERT_EQ(region.dtype(), DType::f32);
  // The fit, per axis (center crop / zero pad, the odd voxel at the end): z 7 -> 9 pads 1
  // before, y 6 -> 4 drops 1 at each end, x 5 -> 8 pads 1 before: (z, y, x) = (d - 1, h + 1, w - 1).
  int64_t ones = 0;
  for (int64_t d = 0; d < 9; ++d)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t w = 0; w < 8; ++w) {
        const int64_t z = d - 1, y = h + 1, x = w - 1;
        const bool inside =
            z >= 0 && z < kZ && y >= 0 && y < kY && x >= 0 && x < kX && in_box(canonical_world(x, y, z));
        const float got = region.data<float>()[(d * 4 + h) * 8 + w];
        EXPECT_EQ(got, inside ? 1.0f : 0.0f) << d << ", " << h << ", " << w;
        ones += inside;
      }
  EXPECT_EQ(ones, 3 * 3 * 3);  // x 1..3, z 2..4, and y 2..4 of 2..5 (y = 5 was cropped)

  // Back on the stored grid: the mask (as 0/1) where the crop kept the voxel (y 1..4, i.e.
  // i = 5 - y in 1..4), 0 elsewhere.
  const Tensor stored = data::read_nifti_volume(path("mask.nii.gz"));
  const Tensor back = data::map_to_stored(region, s.to_stored, s.stored.dims);
  for (int64_t v = 0; v < stored.numel(); ++v) {
    const int64_t i = v % kNi;
    const float expected = stored.data<float>()[v] != 0.0f && i >= 1 && i <= 4 ? 1.0f : 0.0f;
    EXPECT_EQ(back.data<float>()[v], expected) << v;
  }
  // Padded on every axis, the whole mask comes back.
  const data::Scan padded = scan(path("scan.nii.gz"), {9, 8, 8});
  const Tensor whole = data::map_to_stored(explain::region_in_network_space(path("mask.nii.gz"), padded),
                                           padded.to_stored, padded.stored.dims);
  int64_t nonzero = 0;
  for (int64_t v = 0; v < stored.numel(); ++v) {
    EXPECT_EQ(whole.data<float>()[v], stored.data<float>()[v] != 0.0f ? 1.0f : 0.0f) << v;
    nonzero += stored.data<float>()[v] != 0.0f;
  }
  EXPECT_EQ(nonzero, 3 * 4 * 3);
}

TEST_F(RegionMaskTest, NearestStoredVoxelRoundsHalfUp) {
  // Stored [1, 1, 3] = {0, 5, 7}; the network voxels sit half a voxel past stored w = 0, 1, 2.
  const std::string file = write("row.nii", {3, 1, 1}, kPilSform, 16,
                                 [](const std::array<std::array<float, 4>, 3>&, int64_t i, int64_t, int64_t) {
                                   return i == 0 ? 0.0 : 3.0 + 2.0 * double(i);
                                 });
  data::Scan s;
  s.volume = Tensor::zeros(Shape{1, 1, 3});
  s.stored = data::read_nifti_geometry(file);
  s.to_stored = data::identity_index_map();
  s.to_stored[2][3] = -0.5;  // w - 0.5: rounds up to w
  Tensor region = explain::region_in_network_space(file, s);
  EXPECT_EQ(std::vector<float>(region.data<float>(), region.data<float>() + 3), (std::vector<float>{0, 1, 1}));
  s.to_stored[2][3] = 0.5;  // w + 0.5: w + 1, beyond the grid for w = 2
  region = explain::region_in_network_space(file, s);
  EXPECT_EQ(std::vector<float>(region.data<float>(), region.data<float>() + 3), (std::vector<float>{1, 1, 0}));
}

TEST_F(RegionMaskTest, MasksInAnotherGridAreRefusedNamingBoth) {
  const data::Scan s = scan(anatomy(), {9, 4, 8});
  // The message names the mask, its grid and the scan's (`mask_grid`, `scan_grid`).
  const auto expect_refused = [&](const std::string& mask, const std::string& mask_grid, const std::string& scan_grid) {
    const std::string message = error_message([&] { explain::region_in_network_space(mask, s); });
    EXPECT_TRUE(contains(message, mask));
    EXPECT_TRUE(contains(message, mask_grid));
    EXPECT_TRUE(contains(message, scan_grid));
    EXPECT_TRUE(contains(message, "the mask must be in the scan's own voxel grid"));
  };
  // Other dims: one slice fewer along k.
  expect_refused(write("thin.nii", {kNi, kNj, kNk - 1}, kPilSform, 4, box_value), "shape [4, 7, 6]", "shape [5, 7, 6]");
  // The same dims, shifted 2 mm anteriorly.
  std::array<std::array<float, 4>, 3> shifted = kPilSform;
  shifted[1][3] = 16;
  expect_refused(write("moved.nii", {kNi, kNj, kNk}, shifted, 4, box_value),
                 "[[0, 0, -1.5, 3], [-2, 0, 0, 16], [0, -2.5, 0, 20]]",
                 "[[0, 0, -1.5, 3], [-2, 0, 0, 14], [0, -2.5, 0, 20]]");
  // Within 1e-3 mm it is the same grid.
  std::array<std::array<float, 4>, 3> close = kPilSform;
  close[1][3] = 14.0002f;
  const std::string near = write("near.nii", {kNi, kNj, kNk}, close, 4, box_value);
  EXPECT_EQ(error_message([&] { explain::region_in_network_space(near, s); }), "(no error)");
  // A 4-D file and a missing one.
  const std::string series = write("series.nii", {kNi, kNj, kNk, 2}, kPilSform, 4, box_value);
  const std::string four_d = error_message([&] { explain::region_in_network_space(series, s); });
  EXPECT_TRUE(contains(four_d, "region mask"));
  EXPECT_TRUE(contains(four_d, series));
  EXPECT_TRUE(contains(four_d, "4-D"));
  const std::string missing = error_message([&] { explain::region_in_network_space(path("none.nii"), s); });
  EXPECT_TRUE(contains(missing, "region mask"));
  EXPECT_TRUE(contains(missing, path("none.nii")));
}

}  // namespace
}  // namespace gridnn
