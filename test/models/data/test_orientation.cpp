// Orientation (models/data/orientation.h): one non-symmetric volume with distinct dims stored
// in many orientations (sform only, qform only, both, qfac = -1, permuted axes, 5 degrees
// oblique) loads to the same canonical tensor; both codes unset keep the stored order; the
// maps back to the stored grid (map_to_stored) round-trip exactly for orientation and crop,
// closely through resampling; write_nifti_like keeps the scan's geometry fields byte for
// byte; the training options carry --orientation and --spacing.
#include <gtest/gtest.h>
#include <nifti2_io.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/data/nifti_dataset.h"
#include "models/data/nifti_volume.h"
#include "models/data/orientation.h"
#include "models/train/options.h"
#include "test/models/data/data_test_support.h"
#include "test/models/data/nifti_writer.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

using data::Affine;
using data::AffineSource;
using data::IndexMap;
using data::Orientation;
using test::contains;
using test::error_message;

// The canonical (RAS+) volume: dims x, y, z = 5, 6, 7, voxel size 1.5, 2, 2.5 mm.
constexpr int64_t kN[3] = {5, 6, 7};
double canonical_value(int64_t x, int64_t y, int64_t z) { return 1 + x + 10 * y + 100 * z + 0.25 * x * y; }

Affine canonical_affine() {
  Affine a{};
  a[0] = {1.5, 0, 0, -3};
  a[1] = {0, 2.0, 0, 4};
  a[2] = {0, 0, 2.5, 5};
  a[3] = {0, 0, 0, 1};
  return a;
}

// Stored voxel axis j runs along world axis o[j] with sign f[j].
struct Layout {
  std::array<int, 3> o;
  std::array<int, 3> f;
};

Affine rotate_z(const Affine& a, double degrees) {
  const double t = degrees * M_PI / 180.0, c = std::cos(t), s = std::sin(t);
  Affine out = a;
  for (int col = 0; col < 4; ++col) {
    out[0][col] = c * a[0][col] - s * a[1][col];
    out[1][col] = s * a[0][col] + c * a[1][col];
  }
  return out;
}

// The stored dims {n_i, n_j, n_k}, values (i fastest) and affine of the canonical volume
// stored as `layout` (of the canonical affine `ac`).
struct Stored {
  std::array<int64_t, 3> n;
  std::vector<double> values;
  Affine affine;
};

Stored store(const Layout& l, const std::function<double(int64_t, int64_t, int64_t)>& value,
             const Affine& ac = canonical_affine()) {
  Stored s;
  for (int j = 0; j < 3; ++j) s.n[size_t(j)] = kN[l.o[size_t(j)]];
  for (int64_t k = 0; k < s.n[2]; ++k)
    for (int64_t jj = 0; jj < s.n[1]; ++jj)
      for (int64_t i = 0; i < s.n[0]; ++i) {
        const int64_t idx[3] = {i, jj, k};
        int64_t c[3];
        for (int j = 0; j < 3; ++j) c[l.o[size_t(j)]] = l.f[size_t(j)] == 1 ? idx[j] : s.n[size_t(j)] - 1 - idx[j];
        s.values.push_back(value(c[0], c[1], c[2]));
      }
  s.affine = Affine{};
  s.affine[3][3] = 1;
  for (int r = 0; r < 3; ++r) {
    s.affine[r][3] = ac[r][3];
    for (int j = 0; j < 3; ++j) {
      s.affine[r][j] = l.f[size_t(j)] * ac[r][l.o[size_t(j)]];
      if (l.f[size_t(j)] < 0) s.affine[r][3] += double(s.n[size_t(j)] - 1) * ac[r][l.o[size_t(j)]];
    }
  }
  return s;
}

void set_sform(test::NiftiSpec& spec, const Affine& a, int code) {
  spec.sform_code = code;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) spec.srow[size_t(r)][size_t(c)] = float(a[r][c]);
}

void set_qform(test::NiftiSpec& spec, const Affine& a, int code) {
  nifti_dmat44 m{};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) m.m[r][c] = a[r][c];
  double b, cq, d, x, y, z, dx, dy, dz, qfac;
  nifti_dmat44_to_quatern(m, &b, &cq, &d, &x, &y, &z, &dx, &dy, &dz, &qfac);
  spec.qform_code = code;
  spec.quatern = {float(b), float(cq), float(d)};
  spec.qoffset = {float(x), float(y), float(z)};
  spec.pixdim = {float(dx), float(dy), float(dz)};
  spec.qfac = float(qfac);
}

Tensor canonical_tensor(const std::function<double(int64_t, int64_t, int64_t)>& value) {
  Tensor t = Tensor::empty({kN[2], kN[1], kN[0]});
  float* p = t.data<float>();
  for (int64_t z = 0; z < kN[2]; ++z)
    for (int64_t y = 0; y < kN[1]; ++y)
      for (int64_t x = 0; x < kN[0]; ++x) *p++ = float(value(x, y, z));
  return t;
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  if (std::memcmp(a.data<float>(), b.data<float>(), size_t(a.numel()) * sizeof(float)) != 0) {
    for (int64_t i = 0; i < a.numel(); ++i)
      if (a.data<float>()[i] != b.data<float>()[i])
        return ::testing::AssertionFailure()
               << "element " << i << ": " << a.data<float>()[i] << " vs " << b.data<float>()[i];
  }
  return ::testing::AssertionSuccess();
}

class OrientationTest : public test::ScratchDirTest {
 protected:
  std::string write(const std::string& name, const test::NiftiSpec& spec, const std::vector<double>& values) {
    test::write_nifti1(path(name), spec, values);
    return path(name);
  }
  static test::NiftiSpec spec_of(const Stored& s) {
    test::NiftiSpec spec;
    spec.dims = {s.n[0], s.n[1], s.n[2]};
    spec.datatype = NIFTI_TYPE_FLOAT32;
    return spec;
  }
  static data::NiftiDataset dataset(const std::string& file, data::NiftiDatasetOptions o) {
    data::Manifest m;
    m.source = "test.csv";
    m.rows.push_back({file, 0, data::Split::unassigned, 2});
    return data::NiftiDataset(m, o);
  }
  static data::NiftiDatasetOptions options(std::array<int64_t, 3> target = {kN[2], kN[1], kN[0]}) {
    data::NiftiDatasetOptions o;
    o.target = target;
    o.normalize = false;
    return o;
  }
};

const Layout kRAS{{0, 1, 2}, {1, 1, 1}};
const Layout kLAS{{0, 1, 2}, {-1, 1, 1}};
const Layout kLPS{{0, 1, 2}, {-1, -1, 1}};
const Layout kSRA{{2, 0, 1}, {1, 1, 1}};     // i -> S, j -> R, k -> A
const Layout kPIL{{1, 2, 0}, {-1, -1, -1}};  // i -> P, j -> I, k -> L

TEST(Orientation, ParseAndIoOrientation) {
  EXPECT_EQ(parse_enum<Orientation>("canonical"), Orientation::canonical);
  EXPECT_EQ(parse_enum<Orientation>("native"), Orientation::native);
  const std::string message = error_message([] { parse_enum<Orientation>("RAS"); });
  EXPECT_TRUE(contains(message, "\"RAS\"")) << message;
  EXPECT_TRUE(contains(message, "canonical")) << message;
  EXPECT_TRUE(contains(message, "native")) << message;

  const data::AxisOrientation pil = data::io_orientation(store(kPIL, canonical_value).affine);
  EXPECT_EQ(pil[0], (std::array<int, 2>{1, -1}));
  EXPECT_EQ(pil[1], (std::array<int, 2>{2, -1}));
  EXPECT_EQ(pil[2], (std::array<int, 2>{0, -1}));
  // 40 degrees about z: x still wins column 0 (cos 40 > sin 40), y column 1.
  const data::AxisOrientation oblique = data::io_orientation(rotate_z(canonical_affine(), 40));
  EXPECT_EQ(oblique[0], (std::array<int, 2>{0, 1}));
  EXPECT_EQ(oblique[1], (std::array<int, 2>{1, 1}));
  // 50 degrees: x and y swap (nibabel's greedy rule: column 0 takes row 1 first).
  const data::AxisOrientation swapped = data::io_orientation(rotate_z(canonical_affine(), 50));
  EXPECT_EQ(swapped[0], (std::array<int, 2>{1, 1}));
  EXPECT_EQ(swapped[1], (std::array<int, 2>{0, -1}));
  Affine degenerate = canonical_affine();
  for (int r = 0; r < 3; ++r) degenerate[r][1] = degenerate[r][0];
  EXPECT_TRUE(contains(error_message([&] { data::io_orientation(degenerate, "scan.nii"); }), "scan.nii"));
}

TEST_F(OrientationTest, EveryStoredLayoutLoadsToTheSameCanonicalTensor) {
  const Tensor expected = canonical_tensor(canonical_value);
  struct Case {
    std::string name;
    Layout layout;
    bool sform, qform;
    double oblique_degrees = 0;
  };
  const std::vector<Case> cases = {
      {"ras_sform", kRAS, true, false}, {"las_sform", kLAS, true, false}, {"lps_sform", kLPS, true, false},
      {"sra_sform", kSRA, true, false}, {"pil_sform", kPIL, true, false}, {"lps_qform", kLPS, false, true},
      {"las_qform", kLAS, false, true},  // det < 0: qfac = -1
      {"pil_qform", kPIL, false, true}, {"sra_both", kSRA, true, true},   {"lps_oblique5", kLPS, true, true, 5.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Affine ac = c.oblique_degrees != 0 ? rotate_z(canonical_affine(), c.oblique_degrees) : canonical_affine();
    const Stored s = store(c.layout, canonical_value, ac);
    test::NiftiSpec spec = spec_of(s);
    if (c.sform) set_sform(spec, s.affine, 4);
    if (c.qform) set_qform(spec, s.affine, 1);
    if (c.name == "las_qform") {
      EXPECT_EQ(spec.qfac, -1.0f);
    }
    const std::string file = write(c.name + ".nii", spec, s.values);

    const data::Scan scan = dataset(file, options()).load_scan(0);
    EXPECT_EQ(scan.stored.source, c.sform ? AffineSource::sform : AffineSource::qform);
    EXPECT_EQ(scan.stored.dims, (std::array<int64_t, 3>{s.n[2], s.n[1], s.n[0]}));
    EXPECT_TRUE(bitwise_equal(scan.volume, expected));
    // The network grid's affine is the canonical one.
    const Affine an = data::grid_affine(scan.stored.affine, scan.to_stored);
    for (int r = 0; r < 4; ++r)
      for (int k = 0; k < 4; ++k) {
        if (c.sform && !c.oblique_degrees) {
          EXPECT_EQ(an[r][k], ac[r][k]) << r << "," << k;
        } else {
          EXPECT_NEAR(an[r][k], ac[r][k], 1e-5) << r << "," << k;
        }
      }
    // And back to the stored grid, exactly.
    const Tensor stored = data::read_nifti_volume(file);
    EXPECT_TRUE(bitwise_equal(data::map_to_stored(scan.volume, scan.to_stored, scan.stored.dims), stored));
    // native keeps the stored order.
    data::NiftiDatasetOptions native = options({s.n[2], s.n[1], s.n[0]});
    native.orientation = Orientation::native;
    EXPECT_TRUE(bitwise_equal(dataset(file, native).load_scan(0).volume, stored));
  }
}

TEST_F(OrientationTest, SformWinsOverQformAndNegativeCodesAreUnset) {
  const Stored lps = store(kLPS, canonical_value);
  const Stored pil = store(kPIL, canonical_value);
  // The LPS data with its sform, and a qform that says PIL: the sform wins.
  test::NiftiSpec both = spec_of(lps);
  set_sform(both, lps.affine, 2);
  set_qform(both, pil.affine, 1);
  const std::string f1 = write("both.nii", both, lps.values);
  EXPECT_TRUE(bitwise_equal(dataset(f1, options()).load_scan(0).volume, canonical_tensor(canonical_value)));
  // A negative sform_code is unset: the qform (LPS) is used, not the sform (PIL).
  test::NiftiSpec negative = spec_of(lps);
  set_sform(negative, pil.affine, -1);
  set_qform(negative, lps.affine, 1);
  const std::string f2 = write("negative.nii", negative, lps.values);
  const data::Scan scan = dataset(f2, options()).load_scan(0);
  EXPECT_EQ(scan.stored.source, AffineSource::qform);
  EXPECT_TRUE(bitwise_equal(scan.volume, canonical_tensor(canonical_value)));
}

TEST_F(OrientationTest, NoCodesKeepTheStoredOrderWithAWarning) {
  const Stored lps = store(kLPS, canonical_value);
  test::NiftiSpec spec = spec_of(lps);
  spec.pixdim = {1.5f, 2.0f, 2.5f};
  const std::string file = write("nocodes.nii", spec, lps.values);
  testing::internal::CaptureStderr();
  const data::Scan scan = dataset(file, options({lps.n[2], lps.n[1], lps.n[0]})).load_scan(0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "no sform/qform: using the stored voxel order")) << err;
  EXPECT_TRUE(contains(err, file)) << err;
  EXPECT_EQ(scan.stored.source, AffineSource::none);
  EXPECT_EQ(scan.to_stored, data::identity_index_map());
  EXPECT_TRUE(bitwise_equal(scan.volume, data::read_nifti_volume(file)));
  // The geometry still reports nibabel's base affine (LAS, centred) and the zooms.
  EXPECT_EQ(scan.stored.affine[0][0], -1.5);
  EXPECT_EQ(scan.stored.affine[0][3], 3.0);   // -(5 - 1) / 2 * -1.5
  EXPECT_EQ(scan.stored.affine[1][3], -5.0);  // -(6 - 1) / 2 * 2
  EXPECT_EQ(scan.stored.zooms, (std::array<double, 3>{1.5, 2.0, 2.5}));
}

TEST_F(OrientationTest, CropAndPadMapBackExactly) {
  const Stored pil = store(kPIL, canonical_value);
  test::NiftiSpec spec = spec_of(pil);
  set_sform(spec, pil.affine, 1);
  const std::string file = write("pil.nii", spec, pil.values);
  const Tensor stored = data::read_nifti_volume(file);
  // Cropped: the stored voxels inside the crop come back, the others are 0.
  const data::Scan crop = dataset(file, options({3, 4, 5})).load_scan(0);
  const Tensor back = data::map_to_stored(crop.volume, crop.to_stored, crop.stored.dims);
  int64_t kept = 0;
  for (int64_t v = 0; v < stored.numel(); ++v) {
    const float b = back.data<float>()[v];
    if (b != 0.0f) {
      EXPECT_EQ(b, stored.data<float>()[v]) << v;
      ++kept;
    }
  }
  EXPECT_EQ(kept, 3 * 4 * 5);
  // Padded: every stored voxel comes back.
  const data::Scan pad = dataset(file, options({9, 8, 8})).load_scan(0);
  EXPECT_TRUE(bitwise_equal(data::map_to_stored(pad.volume, pad.to_stored, pad.stored.dims), stored));
  // The fit step's map agrees with the crop: network (0, 0, 0) is canonical (2, 1, 0)
  // (7 -> 3 drops 2 at the start, 6 -> 4 drops 1, 5 -> 5 none).
  const data::IndexMap fit = data::crop_or_pad_index_map({7, 6, 5}, {3, 4, 5});
  EXPECT_EQ(data::apply_index_map(fit, {0, 0, 0}), (std::array<double, 3>{2, 1, 0}));
}

TEST_F(OrientationTest, SpacingAndResampleMapBackClosely) {
  // A volume linear in the canonical index: resampling inside the grid is exact for it.
  auto ramp = [](int64_t x, int64_t y, int64_t z) { return 1000.0 + 2.0 * x + 3.0 * y - 1.0 * z; };
  const Stored lps = store(kLPS, ramp);
  test::NiftiSpec spec = spec_of(lps);
  set_qform(spec, lps.affine, 1);
  const std::string file = write("ramp.nii", spec, lps.values);
  data::NiftiDatasetOptions o = options({8, 8, 8});
  o.fit = data::Fit::resample;
  o.spacing = 3.0;  // 5 x 1.5, 6 x 2, 7 x 2.5 mm -> 3, 4, 6 voxels of 3 mm
  const data::Scan scan = dataset(file, o).load_scan(0);
  // Spacing grid (z, y, x) = (6, 4, 3): canonical = m * s + t with m = n / n', t = m / 2 - 1/2;
  // network voxel 0 is spacing voxel 0 (corner-aligned fit).
  const std::array<double, 3> corner = data::apply_index_map(scan.to_stored, {0, 0, 0});
  // Stored LPS: stored (d, h, w) = (k, j, i) = (z, 5 - y, 4 - x); spacing z: t = 7/12 - 1/2.
  EXPECT_NEAR(corner[0], 7.0 / 12.0 - 0.5, 1e-12);
  EXPECT_NEAR(corner[1], 5.0 - (6.0 / 8.0 - 0.5), 1e-12);
  EXPECT_NEAR(corner[2], 4.0 - (5.0 / 6.0 - 0.5), 1e-12);
  const Tensor back = data::map_to_stored(scan.volume, scan.to_stored, scan.stored.dims);
  const Tensor stored = data::read_nifti_volume(file);
  // Stored voxels inside the resampled grid's extent (no clamping on the way) come back
  // to rounding; the outer ones are within the clamp distance times the slope.
  const IndexMap& m = scan.to_stored;
  int64_t interior = 0;
  for (int64_t d = 0; d < scan.stored.dims[0]; ++d)
    for (int64_t h = 0; h < scan.stored.dims[1]; ++h)
      for (int64_t w = 0; w < scan.stored.dims[2]; ++w) {
        const int64_t v = (d * scan.stored.dims[1] + h) * scan.stored.dims[2] + w;
        const double idx[3] = {double(d), double(h), double(w)};
        bool inside = true;
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c)
            if (m[r][c] != 0.0) {
              const double x = (idx[r] - m[r][3]) / m[r][c];
              inside = inside && x >= 0 && x <= 7;
            }
        const double diff = std::fabs(double(back.data<float>()[v]) - double(stored.data<float>()[v]));
        if (inside) {
          EXPECT_LE(diff, 1e-3) << d << "," << h << "," << w;
          ++interior;
        } else {
          EXPECT_LE(diff, 2.0 * 1.0 / 3.0 + 3.0 * 0.25 + 1.0 / 12.0 + 1e-3) << d << "," << h << "," << w;
        }
      }
  EXPECT_GT(interior, 20);
  // resample_to_spacing's map is exactly what it sampled: a 1-D check along W.
  data::GridVolume g;
  g.volume = Tensor::empty({1, 1, 4});
  for (int i = 0; i < 4; ++i) g.volume.data<float>()[i] = float(10 * i);
  g.to_stored = data::identity_index_map();
  g.spacing = {1, 1, 1};
  const data::GridVolume r = data::resample_to_spacing(g, 0.5);  // 4 -> 8 voxels
  ASSERT_EQ(r.volume.size(2), 8);
  for (int out = 0; out < 8; ++out) {
    const double p = std::clamp(r.to_stored[2][2] * out + r.to_stored[2][3], 0.0, 3.0);
    EXPECT_FLOAT_EQ(r.volume.data<float>()[out], float(10 * p)) << out;
  }
  EXPECT_EQ(r.spacing[2], 0.5);
}

TEST_F(OrientationTest, WriteNiftiLikeKeepsTheGeometryFields) {
  const Stored s = store(kLAS, canonical_value, rotate_z(canonical_affine(), 5));
  test::NiftiSpec spec = spec_of(s);
  set_qform(spec, s.affine, 1);                             // qfac -1
  set_sform(spec, store(kLAS, canonical_value).affine, 4);  // differs from the qform
  spec.big_endian = true;
  const std::string scan_path = write("scan.nii", spec, s.values);
  const Tensor heat = data::read_nifti_volume(scan_path);
  for (const std::string name : {"heat.nii", "heat.nii.gz"}) {
    SCOPED_TRACE(name);
    const std::string out = path(name);
    data::write_nifti_like(out, heat, scan_path);
    std::unique_ptr<nifti_image, void (*)(nifti_image*)> a(nifti_image_read(scan_path.c_str(), 0), nifti_image_free);
    std::unique_ptr<nifti_image, void (*)(nifti_image*)> b(nifti_image_read(out.c_str(), 0), nifti_image_free);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(b->datatype, NIFTI_TYPE_FLOAT32);
    EXPECT_EQ(b->scl_slope, 1.0);
    EXPECT_EQ(b->scl_inter, 0.0);
    EXPECT_EQ(b->num_ext, 0);
    int version = 0;
    std::unique_ptr<void, void (*)(void*)> raw(nifti_read_header(out.c_str(), &version, 0), std::free);
    EXPECT_EQ(version, 1);
    for (int d = 0; d < 8; ++d) EXPECT_EQ(a->dim[d], b->dim[d]) << d;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(a->pixdim[d], b->pixdim[d]) << d;
    EXPECT_EQ(b->qform_code, 1);
    EXPECT_EQ(b->sform_code, 4);
    EXPECT_EQ(a->qfac, b->qfac);
    EXPECT_EQ(b->qfac, -1.0);
    const double fa[6] = {a->quatern_b, a->quatern_c, a->quatern_d, a->qoffset_x, a->qoffset_y, a->qoffset_z};
    const double fb[6] = {b->quatern_b, b->quatern_c, b->quatern_d, b->qoffset_x, b->qoffset_y, b->qoffset_z};
    for (int q = 0; q < 6; ++q) EXPECT_EQ(fa[q], fb[q]) << q;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(a->sto_xyz.m[r][c], b->sto_xyz.m[r][c]) << r << "," << c;
        EXPECT_EQ(a->qto_xyz.m[r][c], b->qto_xyz.m[r][c]) << r << "," << c;
      }
    // Our geometry reads the same from both, and the data comes back.
    data::ScanGeometry ga, gb;
    data::read_nifti_volume(scan_path, &ga);
    const Tensor back = data::read_nifti_volume(out, &gb);
    EXPECT_EQ(ga.affine, gb.affine);
    EXPECT_EQ(gb.source, AffineSource::sform);
    EXPECT_TRUE(bitwise_equal(back, heat));
  }
  // The shape must be the scan's stored shape; errors name the files.
  const std::string message = error_message([&] {
    data::write_nifti_like(path("bad.nii"), Tensor::zeros({2, 2, 2}), scan_path);
  });
  EXPECT_TRUE(contains(message, "bad.nii")) << message;
  EXPECT_TRUE(contains(message, scan_path)) << message;
  EXPECT_TRUE(contains(error_message([&] { data::write_nifti_like(path("x.img"), heat, scan_path); }), "x.img"));
  // NIfTI-2 scans give NIfTI-2 heatmaps.
  test::NiftiSpec two;
  two.dims = {3, 4, 5};
  std::vector<double> values(60);
  for (size_t v = 0; v < values.size(); ++v) values[v] = double(v);
  test::write_nifti_with_library(path("two.nii"), two, values, 2);
  data::write_nifti_like(path("two_heat.nii"), data::read_nifti_volume(path("two.nii")), path("two.nii"));
  int version = 0;
  std::unique_ptr<void, void (*)(void*)> n2(nifti_read_header(path("two_heat.nii").c_str(), &version, 0), std::free);
  ASSERT_TRUE(n2);
  EXPECT_EQ(version, 2);
  EXPECT_EQ(static_cast<nifti_2_header*>(n2.get())->datatype, NIFTI_TYPE_FLOAT32);
  EXPECT_TRUE(bitwise_equal(data::read_nifti_volume(path("two_heat.nii")), data::read_nifti_volume(path("two.nii"))));
}

TEST(OrientationOptions, JsonRoundTripAndValidation) {
  train::TrainOptions o;
  o.epochs = 1;
  EXPECT_EQ(o.data.orientation, Orientation::canonical);
  EXPECT_EQ(o.data.spacing, 0.0);
  o.data.orientation = Orientation::native;
  o.data.spacing = 1.25;
  const train::TrainOptions back = train::options_from_json(train::to_json(o));
  EXPECT_EQ(back.data.orientation, Orientation::native);
  EXPECT_EQ(back.data.spacing, 1.25);
  // Older checkpoints have neither key: the defaults.
  std::string old = train::to_json(o);
  for (const std::string key : {",\"orientation\":\"native\"", ",\"spacing\":1.25"}) {
    const size_t at = old.find(key);
    ASSERT_NE(at, std::string::npos) << old;
    old.erase(at, key.size());
  }
  const train::TrainOptions legacy = train::options_from_json(old);
  EXPECT_EQ(legacy.data.orientation, Orientation::native);  // older runs read the stored voxel order
  EXPECT_EQ(legacy.data.spacing, 0.0);
  train::validate(back);
  std::string bad_orientation = train::to_json(o);
  bad_orientation.replace(bad_orientation.find("\"native\""), 8, "\"RAS\"");
  EXPECT_TRUE(contains(error_message([&] { train::options_from_json(bad_orientation); }),
                       "unknown orientation \"RAS\"; use canonical"));
  train::TrainOptions bad = o;
  bad.data.spacing = -1;
  EXPECT_TRUE(contains(error_message([&] { train::validate(bad); }), "--spacing"));
}

}  // namespace
}  // namespace gridnn
