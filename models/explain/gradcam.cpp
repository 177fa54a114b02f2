// 3D Grad-CAM on one rank of a process grid (gradcam.h).
#include "models/explain/gradcam.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/data/volume_transforms.h"
#include "models/dist/factory.h"
#include "parallel/process_grid.h"

namespace gridnn::explain {

namespace {

bool is_volume(const nn::BlockInfo& b) { return b.output_size[0] > 0; }

// Rows of a [rows, cols] double matrix summed over the ranks of `row`, in rank order, so
// every rank gets the same bits. Each partial travels as two floats (the value rounded, and
// what the rounding left), which keeps about 48 bits.
std::vector<double> sum_over_row(const std::vector<double>& partial, parallel::Communicator& row) {
  if (row.size() == 1) return partial;
  const auto n = int64_t(partial.size());
  Tensor mine = Tensor::empty(Shape{1, 2, n});
  float* p = mine.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = float(partial[size_t(i)]);
    p[n + i] = float(partial[size_t(i)] - double(p[i]));
  }
  Tensor all = Tensor::empty(Shape{row.size(), 2, n});
  row.all_gather(mine, all);
  std::vector<double> total(size_t(n), 0.0);
  const float* a = all.data<float>();
  for (int r = 0; r < row.size(); ++r)
    for (int64_t i = 0; i < n; ++i) total[size_t(i)] += double(a[(2 * r) * n + i]) + double(a[(2 * r + 1) * n + i]);
  return total;
}

}  // namespace

std::vector<std::string> explainable_layers(const nn::BlockNetwork& net) {
  std::vector<std::string> names;
  for (const nn::BlockInfo& b : net.blocks())
    if (is_volume(b)) names.push_back(b.name);
  return names;
}

std::string default_layer(const nn::BlockNetwork& net) {
  const std::vector<std::string> names = explainable_layers(net);
  GRIDNN_REQUIRE(!names.empty(), "Grad-CAM needs a network with volume outputs (ResAttNet3D), not an MLP");
  for (auto it = names.rbegin(); it != names.rend(); ++it)
    if (it->rfind("att", 0) == 0) return *it;
  return names.back();
}

size_t layer_index(const nn::BlockNetwork& net, const std::string& name) {
  const auto& blocks = net.blocks();
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].name == name && is_volume(blocks[i])) return i;
  std::string valid;
  for (const std::string& n : explainable_layers(net)) valid += (valid.empty() ? "" : ", ") + n;
  throw Error("--explain-layer '" + name + "' is not a layer Grad-CAM can explain; choose one of: " + valid);
}

CoarseCam grad_cam(nn::Module& model, nn::BlockNetwork& net, size_t layer, const Tensor& x, int64_t target,
                   parallel::Communicator& row) {
  const nn::BlockInfo& info = net.blocks().at(layer);
  GRIDNN_REQUIRE(is_volume(info), "Grad-CAM: block ", info.name, " does not output a volume");
  model.eval();
  const size_t count = net.block_count();
  const Tensor a_live = net.forward_blocks(0, layer + 1, x);
  const Tensor a = a_live.to(Device::cpu());  // the blocks above may reuse their input
  Tensor logits = net.forward_blocks(layer + 1, count, a_live);
  CoarseCam cam;
  cam.logits = logits.to(Device::cpu());
  const int64_t batch = cam.logits.size(0), classes = cam.logits.size(1);

  // Seed: 1 at each sample's class.
  Tensor seed = Tensor::zeros(Shape{batch, classes});
  for (int64_t b = 0; b < batch; ++b) {
    const float* l = cam.logits.data<float>() + b * classes;
    const int64_t c = target >= 0 ? target : int64_t(std::max_element(l, l + classes) - l);
    GRIDNN_REQUIRE(c < classes, "--explain-class ", c, " is not a class of this model (", classes, " classes)");
    cam.target.push_back(c);
    seed.data<float>()[b * classes + c] = 1.0f;
  }
  const Tensor g = net.backward_blocks(layer + 1, count, seed.to(logits.device())).to(Device::cpu());
  model.zero_grad();
  GRIDNN_REQUIRE(g.shape() == a.shape(), "Grad-CAM: the gradient of ", info.name, " is ", g.str(),
                 " but its output is ", a.str());

  // alpha: the gradient's sum over the voxels (over the row's slabs when split) / their count.
  const int64_t channels = a.size(1), local = a.size(2) * a.size(3) * a.size(4);
  const std::array<int64_t, 3>& whole = info.output_size;
  const bool split = nn::depth_is_split(whole[0], row.size());
  std::vector<double> sums(size_t(batch * channels), 0.0);
  const float* gp = g.data<float>();
  for (int64_t bk = 0; bk < batch * channels; ++bk) {
    double s = 0;
    for (int64_t v = 0; v < local; ++v) s += double(gp[bk * local + v]);
    sums[size_t(bk)] = s;
  }
  if (split) sums = sum_over_row(sums, row);
  const double voxels = double(whole[0] * whole[1] * whole[2]);
  cam.weights = Tensor::empty(Shape{batch, channels});
  for (int64_t bk = 0; bk < batch * channels; ++bk) cam.weights.data<float>()[bk] = float(sums[size_t(bk)] / voxels);

  // map = ReLU(sum_k alpha_k A_k), channels in order, in double.
  Tensor slab = Tensor::empty(Shape{batch, a.size(2), a.size(3), a.size(4)});
  const float* ap = a.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t v = 0; v < local; ++v) {
      double m = 0;
      for (int64_t k = 0; k < channels; ++k)
        m += sums[size_t(b * channels + k)] / voxels * double(ap[(b * channels + k) * local + v]);
      slab.data<float>()[b * local + v] = float(std::max(m, 0.0));
    }
  if (!split) {
    cam.maps = slab;
    return cam;
  }
  // The slabs of each sample gathered over the row (balanced depth ranges, docs/design.md §4).
  std::vector<int64_t> depths;
  depths.reserve(row.size());
  for (int r = 0; r < row.size(); ++r) depths.push_back(parallel::balanced_range(whole[0], row.size(), r).size());
  cam.maps = Tensor::empty(Shape{batch, whole[0], whole[1], whole[2]});
  for (int64_t b = 0; b < batch; ++b) {
    Tensor out = cam.maps.narrow(b, 1).reshape(Shape{whole[0], whole[1], whole[2]});
    row.all_gatherv(slab.narrow(b, 1).reshape(Shape{a.size(2), a.size(3), a.size(4)}), out, depths);
  }
  return cam;
}

Tensor upsample_map(const Tensor& map, const std::array<int64_t, 3>& size) {
  GRIDNN_REQUIRE(map.defined() && map.rank() == 3 && map.dtype() == DType::f32 && map.device().is_cpu(),
                 "upsample_map: expected a CPU f32 map [D, H, W], got ", map.defined() ? map.str() : "(undefined)");
  GRIDNN_REQUIRE(size[0] > 0 && size[1] > 0 && size[2] > 0, "upsample_map: sizes must be positive");
  // s = (o + 0.5) * n / m - 0.5 = scale * o + offset; clamping s to [0, n - 1] gives
  // PyTorch's taps (above n - 1 both of its taps are plane n - 1).
  std::array<double, 3> scale{}, offset{};
  for (size_t a = 0; a < 3; ++a) {
    scale[a] = double(map.size(int(a))) / double(size[a]);
    offset[a] = 0.5 * scale[a] - 0.5;
  }
  return data::resample_trilinear_at(map, size, scale, offset);
}

Tensor normalize_map(const Tensor& map, bool* flat) {
  GRIDNN_REQUIRE(map.defined() && map.dtype() == DType::f32 && map.device().is_cpu() && map.numel() > 0,
                 "normalize_map: expected a non-empty CPU f32 map");
  const float* p = map.data<float>();
  const auto [lo, hi] = std::minmax_element(p, p + map.numel());
  const double min = *lo, range = double(*hi) - min;
  if (flat) *flat = !(range > 0);
  Tensor out = Tensor::zeros(map.shape());
  if (range > 0)
    for (int64_t i = 0; i < map.numel(); ++i) out.data<float>()[i] = float((double(p[i]) - min) / range);
  return out;
}

}  // namespace gridnn::explain
