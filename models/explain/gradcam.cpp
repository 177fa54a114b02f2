// Class activation maps on one rank of a process grid (gradcam.h).
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

std::vector<size_t> parse_layers(const nn::BlockNetwork& net, const std::string& spec) {
  if (spec.empty()) return {layer_index(net, default_layer(net))};
  const auto& blocks = net.blocks();
  std::vector<bool> chosen(blocks.size(), false);
  size_t from = 0;
  for (size_t end = 0; from <= spec.size(); from = end + 1) {
    end = std::min(spec.find(',', from), spec.size());
    std::string item = spec.substr(from, end - from);
    const bool onwards = !item.empty() && item.back() == '+';
    if (onwards) item.pop_back();
    // A block by name, else the blocks of a group ("layer3": "layer3.0", "layer3.1", ...).
    std::vector<size_t> named;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (is_volume(blocks[i]) && (blocks[i].name == item || blocks[i].name.rfind(item + ".", 0) == 0))
        named.push_back(i);
    if (named.empty()) (void)layer_index(net, item);  // throws, listing the valid names
    for (size_t i = named.front(); i <= (onwards ? blocks.size() - 1 : named.back()); ++i)
      if (is_volume(blocks[i]) && (onwards || std::find(named.begin(), named.end(), i) != named.end()))
        chosen[i] = true;
  }
  std::vector<size_t> layers;
  for (size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i]) layers.push_back(i);
  return layers;
}

namespace {

// Per (sample, channel) of a [B, C, local] slab: sum over its voxels of f(a, g), in double.
template <class F>
std::vector<double> voxel_sums(const Tensor& a, const Tensor& g, F f) {
  const int64_t rows = a.size(0) * a.size(1), local = a.size(2) * a.size(3) * a.size(4);
  const float* ap = a.data<float>();
  const float* gp = g.data<float>();
  std::vector<double> sums(size_t(rows), 0.0);
  for (int64_t bk = 0; bk < rows; ++bk) {
    double s = 0;
    for (int64_t v = 0; v < local; ++v) s += f(double(ap[bk * local + v]), double(gp[bk * local + v]), bk);
    sums[size_t(bk)] = s;
  }
  return sums;
}

// This rank's slab of the map [B, d, h, w] of one block, and the channel weights (none for
// hirescam), from its output `a` and gradient `g` (CPU, [B, C, d, h, w]).
struct SlabCam {
  Tensor weights, slab;
};

SlabCam slab_cam(const Tensor& a, const Tensor& g, const std::array<int64_t, 3>& whole, bool split,
                 parallel::Communicator& row, CamMethod method) {
  const int64_t batch = a.size(0), channels = a.size(1), local = a.size(2) * a.size(3) * a.size(4);
  auto over_row = [&](const std::vector<double>& partial) { return split ? sum_over_row(partial, row) : partial; };
  std::vector<double> w;  // per (sample, channel), in double
  if (method == CamMethod::gradcam) {
    w = over_row(voxel_sums(a, g, [](double, double gv, int64_t) { return gv; }));
    const double voxels = double(whole[0] * whole[1] * whole[2]);
    for (double& x : w) x /= voxels;
  } else if (method == CamMethod::gradcam_pp) {
    const std::vector<double> s = over_row(voxel_sums(a, g, [](double av, double, int64_t) { return av; }));
    w = over_row(voxel_sums(a, g, [&s](double, double gv, int64_t bk) {
      const double g2 = gv * gv, denominator = 2 * g2 + s[size_t(bk)] * g2 * gv;
      return g2 / ((denominator != 0 ? denominator : 1.0) + 1e-7) * std::max(gv, 0.0);
    }));
  }
  SlabCam out;
  if (!w.empty()) {
    out.weights = Tensor::empty(Shape{batch, channels});
    for (int64_t bk = 0; bk < batch * channels; ++bk) out.weights.data<float>()[bk] = float(w[size_t(bk)]);
  }
  // map = ReLU(sum_k w_k A_k), or for hirescam ReLU(sum_k g_k A_k); channels in order, in double.
  out.slab = Tensor::empty(Shape{batch, a.size(2), a.size(3), a.size(4)});
  const float* ap = a.data<float>();
  const float* gp = g.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t v = 0; v < local; ++v) {
      double m = 0;
      for (int64_t k = 0; k < channels; ++k) {
        const int64_t at = (b * channels + k) * local + v;
        m += (w.empty() ? double(gp[at]) : w[size_t(b * channels + k)]) * double(ap[at]);
      }
      out.slab.data<float>()[b * local + v] = float(std::max(m, 0.0));
    }
  return out;
}

// The whole maps [B, D, H, W] of a block's slabs, gathered over the row (balanced depth
// ranges, docs/design.md §4) when split.
Tensor whole_maps(const Tensor& slab, const std::array<int64_t, 3>& whole, bool split, parallel::Communicator& row) {
  if (!split) return slab;
  std::vector<int64_t> depths;
  depths.reserve(size_t(row.size()));
  for (int r = 0; r < row.size(); ++r) depths.push_back(parallel::balanced_range(whole[0], row.size(), r).size());
  const int64_t batch = slab.size(0);
  Tensor maps = Tensor::empty(Shape{batch, whole[0], whole[1], whole[2]});
  for (int64_t b = 0; b < batch; ++b) {
    Tensor out = maps.narrow(b, 1).reshape(Shape{whole[0], whole[1], whole[2]});
    row.all_gatherv(slab.narrow(b, 1).reshape(Shape{slab.size(1), slab.size(2), slab.size(3)}), out, depths);
  }
  return maps;
}

}  // namespace

std::vector<CoarseCam> class_activation_maps(nn::Module& model, nn::BlockNetwork& net,
                                             const std::vector<size_t>& layers, const Tensor& x,
                                             const std::vector<int64_t>& classes, parallel::Communicator& row,
                                             CamMethod method) {
  GRIDNN_REQUIRE(!layers.empty() && std::is_sorted(layers.begin(), layers.end()) &&
                     std::adjacent_find(layers.begin(), layers.end()) == layers.end(),
                 "class_activation_maps: the layers must be given once each, in network order");
  for (size_t layer : layers)
    GRIDNN_REQUIRE(is_volume(net.blocks().at(layer)), "class activation maps: block ", net.blocks()[layer].name,
                   " does not output a volume");
  model.eval();
  const size_t count = net.block_count();
  // Forward, keeping each target block's output on the CPU (the blocks above may reuse their input).
  std::vector<Tensor> outputs;
  Tensor h = x;
  size_t done = 0;
  for (size_t layer : layers) {
    h = net.forward_blocks(done, layer + 1, h);
    outputs.push_back(h.to(Device::cpu()));
    done = layer + 1;
  }
  const Tensor logits = net.forward_blocks(done, count, h).to(Device::cpu());
  const int64_t batch = logits.size(0), n_classes = logits.size(1);
  GRIDNN_REQUIRE(classes.empty() || int64_t(classes.size()) == batch, "class_activation_maps: ", classes.size(),
                 " classes given for ", batch, " samples");

  // Seed: 1 at each sample's class.
  std::vector<int64_t> target;
  Tensor seed = Tensor::zeros(Shape{batch, n_classes});
  for (int64_t b = 0; b < batch; ++b) {
    const float* l = logits.data<float>() + b * n_classes;
    const int64_t c = classes.empty() ? int64_t(std::max_element(l, l + n_classes) - l) : classes[size_t(b)];
    GRIDNN_REQUIRE(c >= 0 && c < n_classes, "--explain-class ", c, " is not a class of this model (", n_classes,
                   " classes)");
    target.push_back(c);
    seed.data<float>()[b * n_classes + c] = 1.0f;
  }

  // Backward from the head down to the lowest target, each target's gradient kept on the CPU.
  std::vector<CoarseCam> cams(layers.size());
  Tensor dy = seed.to(x.device());
  size_t top = count;
  for (size_t i = layers.size(); i-- > 0;) {
    dy = net.backward_blocks(layers[i] + 1, top, dy);
    top = layers[i] + 1;
    const Tensor g = dy.to(Device::cpu());
    const nn::BlockInfo& info = net.blocks()[layers[i]];
    GRIDNN_REQUIRE(g.shape() == outputs[i].shape(), "class activation maps: the gradient of ", info.name, " is ",
                   g.str(), " but its output is ", outputs[i].str());
    const bool split = nn::depth_is_split(info.output_size[0], row.size());
    SlabCam s = slab_cam(outputs[i], g, info.output_size, split, row, method);
    cams[i] = {logits, target, std::move(s.weights), whole_maps(s.slab, info.output_size, split, row)};
  }
  // The blocks below the lowest target kept their state for a backward that does not come.
  model.release_saved();
  model.zero_grad();
  return cams;
}

CoarseCam grad_cam(nn::Module& model, nn::BlockNetwork& net, size_t layer, const Tensor& x, int64_t target,
                   parallel::Communicator& row, CamMethod method) {
  const int64_t batch = x.size(0);
  return class_activation_maps(model, net, {layer}, x,
                               target >= 0 ? std::vector<int64_t>(size_t(batch), target) : std::vector<int64_t>{}, row,
                               method)
      .front();
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
