#include "models/data/orientation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "models/data/volume_transforms.h"

namespace gridnn::data {
namespace {

using Mat3 = std::array<std::array<double, 3>, 3>;

double det3(const Mat3& a) {
  return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
         a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
}

// The inverse transpose of a nonsingular 3x3 matrix (its cofactor matrix / det).
Mat3 inverse_transpose(const Mat3& a, double det) {
  Mat3 c;
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 3; ++k) {
      const int r1 = (r + 1) % 3, r2 = (r + 2) % 3, k1 = (k + 1) % 3, k2 = (k + 2) % 3;
      c[r][k] = (a[r1][k1] * a[r2][k2] - a[r1][k2] * a[r2][k1]) / det;
    }
  return c;
}

// The orthogonal polar factor of a nonsingular matrix by Newton's iteration
// R <- (R + R^-T) / 2 (quadratic convergence; R = RS itself when RS is orthogonal, up to
// rounding). nibabel takes P * Q^T of the SVD: the same matrix, up to rounding.
Mat3 polar_factor(Mat3 r, const std::string& what) {
  for (int iteration = 0; iteration < 100; ++iteration) {
    const double det = det3(r);
    GRIDNN_REQUIRE(std::isfinite(det) && std::fabs(det) > 1e-12, what,
                   ": the affine's 3x3 part is singular (two voxel axes point the same way, or one "
                   "nowhere); fix the header's sform/qform");
    const Mat3 it = inverse_transpose(r, det);
    double change = 0.0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const double next = 0.5 * (r[i][j] + it[i][j]);
        change = std::max(change, std::fabs(next - r[i][j]));
        r[i][j] = next;
      }
    if (change < 1e-15) return r;
  }
  return r;  // converged to rounding (the change oscillates at the last ulp)
}

void warn_no_orientation(const std::string& path) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "gridnn: warning: %s: no sform/qform: using the stored voxel order (further files "
                 "without them are not reported)\n",
                 path.c_str());
  });
}

}  // namespace

AxisOrientation io_orientation(const Affine& affine, const std::string& what) {
  Mat3 rs;
  for (int j = 0; j < 3; ++j) {
    double zoom = 0.0;
    for (int r = 0; r < 3; ++r) {
      GRIDNN_REQUIRE(std::isfinite(affine[r][j]) && std::isfinite(affine[r][3]), what,
                     ": the affine has non-finite entries; fix the header's sform/qform");
      zoom += affine[r][j] * affine[r][j];
    }
    zoom = std::sqrt(zoom);
    GRIDNN_REQUIRE(zoom > 0.0, what, ": voxel axis ", j,
                   " has no world direction (a zero column in the affine); fix the header's sform/qform");
    for (int r = 0; r < 3; ++r) rs[r][j] = affine[r][j] / zoom;
  }
  Mat3 rot = polar_factor(rs, what);
  AxisOrientation ornt{};
  for (int j = 0; j < 3; ++j) {
    int best = 0;
    double best_abs = -1.0;
    for (int r = 0; r < 3; ++r)
      if (std::fabs(rot[r][j]) > best_abs) {
        best_abs = std::fabs(rot[r][j]);
        best = r;
      }
    GRIDNN_REQUIRE(best_abs > 1e-8, what, ": voxel axis ", j,
                   " has no world direction of its own; fix the header's sform/qform");
    ornt[size_t(j)] = {best, rot[best][j] < 0 ? -1 : 1};
    for (int k = 0; k < 3; ++k) rot[best][k] = 0.0;
  }
  return ornt;
}

IndexMap identity_index_map() {
  IndexMap m{};
  for (int a = 0; a < 3; ++a) m[a][a] = 1.0;
  return m;
}

IndexMap compose(const IndexMap& outer, const IndexMap& inner) {
  IndexMap out{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      double sum = 0.0;
      for (int k = 0; k < 3; ++k) sum += outer[r][k] * inner[k][c];
      out[r][c] = sum;
    }
    double t = outer[r][3];
    for (int k = 0; k < 3; ++k)
      if (inner[k][3] != 0.0) t += outer[r][k] * inner[k][3];
    out[r][3] = t;
  }
  return out;
}

std::array<double, 3> apply_index_map(const IndexMap& map, const std::array<double, 3>& index) {
  std::array<double, 3> out{};
  for (int r = 0; r < 3; ++r) {
    double v = map[r][3];
    for (int k = 0; k < 3; ++k)
      if (map[r][k] != 0.0) v += map[r][k] * index[size_t(k)];
    out[size_t(r)] = v;
  }
  return out;
}

Affine grid_affine(const Affine& stored_affine, const IndexMap& to_stored) {
  // Voxel (i, j, k) of the derived grid is its tensor index (k, j, i): T[j][j'] =
  // m[2 - j][2 - j'], T[j][3] = t[2 - j]; the result is A * T (translation: A[:, 3] first,
  // then the nonzero T[j][3] in order j = 0, 1, 2).
  double t[4][4] = {};
  for (int j = 0; j < 3; ++j) {
    for (int jp = 0; jp < 3; ++jp) t[j][jp] = to_stored[2 - j][2 - jp];
    t[j][3] = to_stored[2 - j][3];
  }
  t[3][3] = 1.0;
  Affine out{};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) {
      double sum = 0.0;
      for (int k = 0; k < 3; ++k)
        if (t[k][c] != 0.0) sum += stored_affine[r][k] * t[k][c];
      out[r][c] = sum;
    }
    double tr = stored_affine[r][3];
    for (int k = 0; k < 3; ++k)
      if (t[k][3] != 0.0) tr += stored_affine[r][k] * t[k][3];
    out[r][3] = tr;
  }
  return out;
}

IndexMap orientation_index_map(const ScanGeometry& g, Orientation orientation, std::array<int64_t, 3>* dims) {
  if (orientation == Orientation::native || g.source == AffineSource::none) {
    if (dims) *dims = g.dims;
    return identity_index_map();
  }
  const AxisOrientation ornt = io_orientation(g.affine, g.path);
  // Voxel axis j (tensor axis 2 - j) of size n_j goes to canonical voxel axis o_j (tensor
  // axis 2 - o_j): i_j = f_j = 1 ? c[o_j] : n_j - 1 - c[o_j].
  IndexMap m{};
  std::array<int64_t, 3> out{};
  for (int j = 0; j < 3; ++j) {
    const int o = ornt[size_t(j)][0], f = ornt[size_t(j)][1];
    const int64_t n = g.dims[size_t(2 - j)];
    m[2 - j][2 - o] = double(f);
    m[2 - j][3] = f < 0 ? double(n - 1) : 0.0;
    out[size_t(2 - o)] = n;
  }
  if (dims) *dims = out;
  return m;
}

GridVolume orient(const Tensor& stored, const ScanGeometry& g, Orientation orientation) {
  GRIDNN_REQUIRE(stored.defined() && stored.rank() == 3 && stored.dtype() == DType::f32 && stored.device().is_cpu() &&
                     stored.size(0) == g.dims[0] && stored.size(1) == g.dims[1] && stored.size(2) == g.dims[2],
                 g.path, ": orient: expected a CPU f32 volume of the stored dims ", g.dims[0], "x", g.dims[1], "x",
                 g.dims[2]);
  if (orientation == Orientation::canonical && g.source == AffineSource::none) warn_no_orientation(g.path);
  std::array<int64_t, 3> dims{};
  GridVolume out;
  out.to_stored = orientation_index_map(g, orientation, &dims);
  // Spacing along tensor axis a: the zoom of the stored voxel axis it reads.
  for (int a = 0; a < 3; ++a)
    for (int r = 0; r < 3; ++r)
      if (out.to_stored[r][a] != 0.0) out.spacing[size_t(a)] = g.zooms[size_t(2 - r)];
  if (out.to_stored == identity_index_map()) {
    out.volume = stored;
    return out;
  }
  // A gather: canonical index x reads stored offset base + sum_a x_a * stride[a].
  const int64_t stored_stride[3] = {g.dims[1] * g.dims[2], g.dims[2], 1};
  int64_t stride[3] = {0, 0, 0}, base = 0;
  for (int r = 0; r < 3; ++r) {
    for (int a = 0; a < 3; ++a) stride[a] += int64_t(out.to_stored[r][a]) * stored_stride[r];
    base += int64_t(out.to_stored[r][3]) * stored_stride[r];
  }
  out.volume = Tensor::empty({dims[0], dims[1], dims[2]});
  const float* src = stored.data<float>();
  float* dst = out.volume.data<float>();
  for (int64_t d = 0; d < dims[0]; ++d)
    for (int64_t h = 0; h < dims[1]; ++h) {
      const float* row = src + base + d * stride[0] + h * stride[1];
      float* o = dst + (d * dims[1] + h) * dims[2];
      for (int64_t w = 0; w < dims[2]; ++w) o[w] = row[w * stride[2]];
    }
  return out;
}

GridVolume resample_to_spacing(const GridVolume& grid, double mm) {
  GRIDNN_REQUIRE(std::isfinite(mm) && mm > 0.0, "--spacing must be a positive number of mm, got ", mm);
  std::array<int64_t, 3> target{};
  std::array<double, 3> scale{}, offset{};
  IndexMap step{};
  GridVolume out;
  for (int a = 0; a < 3; ++a) {
    const int64_t n = grid.volume.size(a);
    const double z = grid.spacing[size_t(a)];
    GRIDNN_REQUIRE(std::isfinite(z) && z > 0.0, "resample_to_spacing: voxel size ", z, " along axis ", a,
                   " must be positive");
    const double size = std::round(double(n) * z / mm);
    GRIDNN_REQUIRE(size < 1e9, "--spacing ", mm, " mm would make axis ", a, " ", size, " voxels long");
    target[size_t(a)] = std::max<int64_t>(1, int64_t(size));
    scale[size_t(a)] = double(n) / double(target[size_t(a)]);
    offset[size_t(a)] = 0.5 * scale[size_t(a)] - 0.5;
    step[a][a] = scale[size_t(a)];
    step[a][3] = offset[size_t(a)];
    out.spacing[size_t(a)] = z * scale[size_t(a)];
  }
  out.volume = resample_trilinear_at(grid.volume, target, scale, offset);
  out.to_stored = compose(grid.to_stored, step);
  return out;
}

IndexMap crop_or_pad_index_map(const std::array<int64_t, 3>& from, const std::array<int64_t, 3>& target) {
  IndexMap m = identity_index_map();
  for (int a = 0; a < 3; ++a) {
    const int64_t n = from[size_t(a)], t = target[size_t(a)];
    m[a][3] = double(n >= t ? (n - t) / 2 : -((t - n) / 2));  // as center_crop_or_pad
  }
  return m;
}

IndexMap resample_index_map(const std::array<int64_t, 3>& from, const std::array<int64_t, 3>& target) {
  IndexMap m{};
  for (int a = 0; a < 3; ++a) {
    const int64_t n = from[size_t(a)], t = target[size_t(a)];
    if (t == 1) {
      m[a][3] = double(n - 1) / 2.0;  // as resample_trilinear
    } else {
      m[a][a] = double(n - 1) / double(t - 1);
    }
  }
  return m;
}

Tensor map_to_stored(const Tensor& net_map, const IndexMap& to_stored, const std::array<int64_t, 3>& stored_dims) {
  GRIDNN_REQUIRE(net_map.defined() && net_map.rank() == 3 && net_map.dtype() == DType::f32 && net_map.device().is_cpu(),
                 "map_to_stored: expected a CPU f32 map [D, H, W], got ",
                 net_map.defined() ? net_map.str() : std::string("an undefined tensor"));
  GRIDNN_REQUIRE(stored_dims[0] > 0 && stored_dims[1] > 0 && stored_dims[2] > 0, "map_to_stored: stored dims ",
                 stored_dims[0], "x", stored_dims[1], "x", stored_dims[2], " must be positive");
  const int64_t N[3] = {net_map.size(0), net_map.size(1), net_map.size(2)};
  // Per network axis c: the stored axis it follows (-1: none, a zero column) and the
  // per-stored-index sample (lo, hi, frac), or "outside".
  int stored_axis_of[3] = {-1, -1, -1};
  for (int r = 0; r < 3; ++r) {
    int nonzero = 0;
    for (int c = 0; c < 3; ++c) {
      GRIDNN_REQUIRE(std::isfinite(to_stored[r][c]) && std::isfinite(to_stored[r][3]),
                     "map_to_stored: the index map has non-finite entries");
      if (to_stored[r][c] != 0.0) {
        ++nonzero;
        GRIDNN_REQUIRE(stored_axis_of[c] < 0, "map_to_stored: the index map is not axis-aligned");
        stored_axis_of[c] = r;
      }
    }
    GRIDNN_REQUIRE(nonzero <= 1, "map_to_stored: the index map is not axis-aligned");
  }
  struct Sample {
    int64_t lo = 0, hi = 0;
    double frac = 0.0;
    bool inside = true;
  };
  // Inside: within max(half a network voxel, half a stored voxel) of the outer network
  // voxel centres; `reach` is that margin in network voxels.
  auto sample_at = [](double x, int64_t n, double reach) {
    Sample s;
    constexpr double kSlack = 1e-9;
    if (!(x >= -reach - kSlack && x <= double(n - 1) + reach + kSlack)) {
      s.inside = false;
      return s;
    }
    x = std::clamp(x, 0.0, double(n - 1));
    s.lo = std::min(int64_t(std::floor(x)), n - 1);
    s.hi = std::min(s.lo + 1, n - 1);
    s.frac = x - double(s.lo);
    return s;
  };
  // samples[c][s_r]: network axis c at stored index s_r of its stored axis r (or the one
  // fixed sample when the column is zero).
  std::vector<Sample> samples[3];
  for (int c = 0; c < 3; ++c) {
    const int r = stored_axis_of[c];
    if (r < 0) {
      samples[c].push_back(sample_at(double(N[c] - 1) / 2.0, N[c], 0.5));
      continue;
    }
    const double reach = std::max(0.5, 0.5 / std::fabs(to_stored[r][c]));
    samples[c].resize(size_t(stored_dims[size_t(r)]));
    for (int64_t s = 0; s < stored_dims[size_t(r)]; ++s)
      samples[c][size_t(s)] = sample_at((double(s) - to_stored[r][3]) / to_stored[r][c], N[c], reach);
  }
  Tensor out = Tensor::zeros({stored_dims[0], stored_dims[1], stored_dims[2]});
  const float* in = net_map.data<float>();
  float* dst = out.data<float>();
  auto at = [&](int64_t d, int64_t h, int64_t w) { return double(in[(d * N[1] + h) * N[2] + w]); };
  for (int64_t s0 = 0; s0 < stored_dims[0]; ++s0)
    for (int64_t s1 = 0; s1 < stored_dims[1]; ++s1)
      for (int64_t s2 = 0; s2 < stored_dims[2]; ++s2) {
        const int64_t s[3] = {s0, s1, s2};
        const Sample* p[3];
        bool inside = true;
        for (int c = 0; c < 3; ++c) {
          const int r = stored_axis_of[c];
          p[c] = &samples[c][r < 0 ? 0 : size_t(s[r])];
          inside = inside && p[c]->inside;
        }
        if (!inside) continue;
        const Sample &sd = *p[0], &sh = *p[1], &sw = *p[2];
        auto along_w = [&](int64_t d, int64_t h) {
          return at(d, h, sw.lo) * (1.0 - sw.frac) + at(d, h, sw.hi) * sw.frac;
        };
        const double plane0 = along_w(sd.lo, sh.lo) * (1.0 - sh.frac) + along_w(sd.lo, sh.hi) * sh.frac;
        const double plane1 = along_w(sd.hi, sh.lo) * (1.0 - sh.frac) + along_w(sd.hi, sh.hi) * sh.frac;
        dst[(s0 * stored_dims[1] + s1) * stored_dims[2] + s2] = float(plane0 * (1.0 - sd.frac) + plane1 * sd.frac);
      }
  return out;
}

}  // namespace gridnn::data
