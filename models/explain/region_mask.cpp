#include "models/explain/region_mask.h"

#include <cmath>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/data/nifti_volume.h"

namespace gridnn::explain {
namespace {

constexpr double kAffineTolerance = 1e-3;  // mm, per entry

std::string affine_str(const data::Affine& a) {
  std::ostringstream os;
  os << "[";
  for (int r = 0; r < 3; ++r) {
    os << (r ? ", [" : "[");
    for (int c = 0; c < 4; ++c) os << (c ? ", " : "") << a[size_t(r)][size_t(c)];
    os << "]";
  }
  os << "]";
  return os.str();
}

std::string dims_str(const std::array<int64_t, 3>& dims) { return Shape{dims[0], dims[1], dims[2]}.str(); }

bool same_affine(const data::Affine& a, const data::Affine& b) {
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 4; ++c)
      if (!(std::abs(a[r][c] - b[r][c]) <= kAffineTolerance)) return false;
  return true;
}

}  // namespace

Tensor region_in_network_space(const std::string& path, const data::Scan& scan) {
  data::ScanGeometry mask_grid;
  Tensor mask;
  try {
    mask = data::read_nifti_volume(path, &mask_grid);
  } catch (const Error& e) {
    throw Error(std::string("region mask: ") + e.what());
  }
  const data::ScanGeometry& scan_grid = scan.stored;
  GRIDNN_REQUIRE(mask_grid.dims == scan_grid.dims && same_affine(mask_grid.affine, scan_grid.affine), "region mask ",
                 path, " (shape ", dims_str(mask_grid.dims), ", affine ", affine_str(mask_grid.affine),
                 ") is not in the voxel grid of the scan ", scan_grid.path, " (shape ", dims_str(scan_grid.dims),
                 ", affine ", affine_str(scan_grid.affine), "): the mask must be in the scan's own voxel grid ",
                 "(the same dims and voxel-to-world affine within ", kAffineTolerance,
                 " mm per entry); resample it onto the scan first");

  const Shape& shape = scan.volume.shape();
  GRIDNN_REQUIRE(shape.rank() == 3, "region mask: the scan's volume ", shape.str(), " is not [D, H, W]");
  const std::array<int64_t, 3>& dims = scan_grid.dims;
  const float* stored = mask.data<float>();
  Tensor region = Tensor::zeros(shape);
  float* out = region.data<float>();
  for (int64_t d = 0; d < shape[0]; ++d)
    for (int64_t h = 0; h < shape[1]; ++h)
      for (int64_t w = 0; w < shape[2]; ++w, ++out) {
        const std::array<double, 3> at = data::apply_index_map(scan.to_stored, {double(d), double(h), double(w)});
        std::array<int64_t, 3> s{};
        bool in_grid = true;
        for (size_t a = 0; a < 3; ++a) {
          const double nearest = std::floor(at[a] + 0.5);  // round half up
          in_grid = in_grid && nearest >= 0 && nearest < double(dims[a]);
          s[a] = in_grid ? int64_t(nearest) : 0;
        }
        if (in_grid && stored[(s[0] * dims[1] + s[1]) * dims[2] + s[2]] != 0.0f) *out = 1.0f;
      }
  return region;
}

}  // namespace gridnn::explain
