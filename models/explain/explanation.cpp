// Fused, transform-averaged heatmaps of a batch (explanation.h).
#include "models/explain/explanation.h"

#include <algorithm>

#include "core/error.h"

namespace gridnn::explain {

namespace {

void require_volume(const Tensor& t, const char* what) {
  GRIDNN_REQUIRE(t.defined() && t.rank() == 3 && t.dtype() == DType::f32 && t.device().is_cpu(), what,
                 ": expected a CPU f32 volume [D, H, W], got ", t.defined() ? t.str() : "(undefined)");
}

// Index arithmetic of a [D, H, W] volume.
struct Volume3 {
  std::array<int64_t, 3> n;
  explicit Volume3(const Tensor& t) : n{t.size(0), t.size(1), t.size(2)} {}
  int64_t at(const std::array<int64_t, 3>& i) const { return (i[0] * n[1] + i[1]) * n[2] + i[2]; }
};

}  // namespace

TtaTransform tta_transform(int64_t t, const std::array<int64_t, 3>& size) {
  GRIDNN_REQUIRE(t >= 0, "tta_transform: transform ", t, " is negative");
  TtaTransform out;
  out.flip = t % 2 == 1;
  const int64_t j = t / 2;
  if (j == 0) return out;
  const int64_t k = j - 1;
  out.axis = int((k / 2) % 3);
  out.shift = (k % 2 == 0 ? 1 : -1) * (1 + k / 6) * std::max<int64_t>(1, size[size_t(out.axis)] / 24);
  return out;
}

Tensor transform_volume(const Tensor& volume, const TtaTransform& t) {
  require_volume(volume, "transform_volume");
  const Volume3 v(volume);
  Tensor out = Tensor::empty(volume.shape());
  const float* in = volume.data<float>();
  float* o = out.data<float>();
  const int64_t n = v.n[size_t(t.axis)];
  for (int64_t d = 0; d < v.n[0]; ++d)
    for (int64_t h = 0; h < v.n[1]; ++h)
      for (int64_t w = 0; w < v.n[2]; ++w) {
        // Output voxel (d, h, w) shows the unflipped voxel u, whose content came from u - shift.
        std::array<int64_t, 3> u{d, h, t.flip ? v.n[2] - 1 - w : w};
        u[size_t(t.axis)] = std::clamp<int64_t>(u[size_t(t.axis)] - t.shift, 0, n - 1);
        o[v.at({d, h, w})] = in[v.at(u)];
      }
  return out;
}

void add_mapped_back(const Tensor& map, const TtaTransform& t, Tensor& sum, Tensor& count) {
  require_volume(map, "add_mapped_back");
  GRIDNN_REQUIRE(sum.shape() == map.shape() && count.shape() == map.shape(), "add_mapped_back: the map ", map.str(),
                 ", the sum ", sum.str(), " and the count ", count.str(), " must have one shape");
  const Volume3 v(map);
  const float* m = map.data<float>();
  float* s = sum.data<float>();
  float* c = count.data<float>();
  const int64_t n = v.n[size_t(t.axis)];
  for (int64_t d = 0; d < v.n[0]; ++d)
    for (int64_t h = 0; h < v.n[1]; ++h)
      for (int64_t w = 0; w < v.n[2]; ++w) {
        // Input voxel (d, h, w) lies at u = (d, h, w) + shift before the flip.
        std::array<int64_t, 3> u{d, h, w};
        u[size_t(t.axis)] += t.shift;
        if (u[size_t(t.axis)] < 0 || u[size_t(t.axis)] >= n) continue;
        if (t.flip) u[2] = v.n[2] - 1 - u[2];
        s[v.at({d, h, w})] += m[v.at(u)];
        c[v.at({d, h, w})] += 1.0f;
      }
}

Tensor fuse_layers(const std::vector<CoarseCam>& cams, int64_t b, const std::array<int64_t, 3>& size) {
  GRIDNN_REQUIRE(!cams.empty(), "fuse_layers: no maps");
  Tensor fused = Tensor::zeros(Shape{size[0], size[1], size[2]});
  float* f = fused.data<float>();
  for (const CoarseCam& cam : cams) {
    const Tensor& maps = cam.maps;
    const Tensor map = maps.narrow(b, 1).reshape(Shape{maps.size(1), maps.size(2), maps.size(3)});
    const Tensor heat = normalize_map(upsample_map(map, size));
    const float* p = heat.data<float>();
    for (int64_t i = 0; i < fused.numel(); ++i) f[i] += p[i];
  }
  const auto layers = float(cams.size());
  for (int64_t i = 0; i < fused.numel(); ++i) f[i] /= layers;
  return fused;
}

BatchExplanation explain_batch(nn::Module& model, nn::BlockNetwork& net, const Tensor& volumes, parallel::Range depth,
                               Device device, const ExplainOptions& options, parallel::Communicator& row) {
  GRIDNN_REQUIRE(volumes.defined() && volumes.rank() == 4 && volumes.dtype() == DType::f32 && volumes.device().is_cpu(),
                 "explain_batch: expected CPU f32 volumes [B, D, H, W], got ",
                 volumes.defined() ? volumes.str() : "(undefined)");
  GRIDNN_REQUIRE(options.tta >= 1, "--explain-tta must be at least 1 (the volume itself), got ", options.tta);
  const int64_t batch = volumes.size(0);
  const std::array<int64_t, 3> size{volumes.size(1), volumes.size(2), volumes.size(3)};
  const Shape volume_shape{size[0], size[1], size[2]};
  BatchExplanation out;
  Tensor sum = Tensor::zeros(volumes.shape());
  Tensor count = Tensor::zeros(volume_shape);
  for (int64_t t = 0; t < options.tta; ++t) {
    const TtaTransform transform = tta_transform(t, size);
    Tensor x = Tensor::empty(Shape{batch, 1, depth.size(), size[1], size[2]});
    for (int64_t b = 0; b < batch; ++b) {
      const Tensor volume = volumes.narrow(b, 1).reshape(volume_shape);
      const Tensor seen = t == 0 ? volume : transform_volume(volume, transform);
      x.narrow(b, 1).copy_from(
          seen.narrow(depth.begin, depth.size()).reshape(Shape{1, 1, depth.size(), size[1], size[2]}));
    }
    std::vector<int64_t> classes = out.target;  // from the untransformed input on
    if (t == 0 && options.target >= 0) classes.assign(size_t(batch), options.target);
    const std::vector<CoarseCam> cams =
        class_activation_maps(model, net, options.layers, x.on(device), classes, row, options.method);
    if (t == 0) {
      out.logits = cams.front().logits;
      out.target = cams.front().target;
    }
    Tensor counted = Tensor::zeros(volume_shape);
    for (int64_t b = 0; b < batch; ++b) {
      Tensor into = sum.narrow(b, 1).reshape(volume_shape);
      add_mapped_back(fuse_layers(cams, b, size), transform, into, b == 0 ? count : counted);
    }
  }
  out.heat = Tensor::empty(volumes.shape());
  const float* c = count.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    Tensor mean = sum.narrow(b, 1).reshape(volume_shape).clone();
    float* m = mean.data<float>();
    for (int64_t i = 0; i < mean.numel(); ++i) m[i] /= c[i];
    bool flat = false;
    out.heat.narrow(b, 1).copy_from(normalize_map(mean, &flat).reshape(Shape{1, size[0], size[1], size[2]}));
    out.flat.push_back(flat);
  }
  return out;
}

}  // namespace gridnn::explain
