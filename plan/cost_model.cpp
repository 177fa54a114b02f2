// The α–β cost model: the networks' layer shapes, each layer's terms for its use of the grid,
// and the sweep over grids (conventions in cost_model.h).
#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

namespace gridnn::plan {

const char* kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::conv: return "conv";
    case LayerKind::fc: return "fc";
    case LayerKind::pool: return "pool";
    case LayerKind::bn: return "bn";
    case LayerKind::attention: return "attention";
    case LayerKind::global_pool: return "global_pool";
  }
  return "?";
}

const char* use_name(LayerUse use) {
  switch (use) {
    case LayerUse::batch: return "batch";
    case LayerUse::model: return "model";
    case LayerUse::domain: return "domain";
  }
  return "?";
}

int64_t Network::weights() const {
  int64_t n = 0;
  for (const LayerShape& l : layers) n += l.weights;
  return n;
}

Strategy pure_batch() { return {LayerUse::batch, LayerUse::batch, true}; }
Strategy pure_model() { return {LayerUse::model, LayerUse::model, true}; }
Strategy pure_domain() { return {LayerUse::domain, LayerUse::model, true}; }
Strategy model_batch() { return {LayerUse::batch, LayerUse::model, true}; }
Strategy model_batch_domain() { return {LayerUse::domain, LayerUse::model, true}; }
Strategy as_gridnn_runs() { return {LayerUse::domain, LayerUse::model, true, true}; }

// ---- the networks ----------------------------------------------------------------------

namespace {

int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

// A convolution (groups g, bias or not) or pooling window over a cube-or-square input: every
// spatial side uses the same window, except sides of size 1 (the third side of a 2D net).
LayerShape window_layer(const std::string& name, LayerKind kind, int64_t cin, int64_t cout,
                        std::array<int64_t, 3> in, int64_t k, int64_t s, int64_t p,
                        int64_t groups = 1, bool bias = false) {
  LayerShape l;
  l.name = name;
  l.kind = kind;
  l.in_channels = cin;
  l.out_channels = cout;
  l.in_size = in;
  l.kernel = k;
  l.stride = s;
  l.padding = p;
  int64_t taps = 1;
  for (int i = 0; i < 3; ++i) {
    const bool flat = in[i] == 1 && k > 1;
    l.out_size[i] = flat ? 1 : window_out(in[i], k, s, p);
    if (!flat) taps *= k;
  }
  const double out_voxels = double(l.out_size[0]) * l.out_size[1] * l.out_size[2];
  if (kind == LayerKind::conv) {
    l.weights = cout * (cin / groups) * taps + (bias ? cout : 0);
    l.forward_flops = 2.0 * cout * (cin / groups) * taps * out_voxels;
  } else {
    l.forward_flops = double(taps) * cout * out_voxels;
  }
  return l;
}

LayerShape fc_layer(const std::string& name, int64_t d_in, int64_t d_out) {
  LayerShape l;
  l.name = name;
  l.kind = LayerKind::fc;
  l.in_channels = d_in;
  l.out_channels = d_out;
  l.weights = d_in * d_out + d_out;
  l.forward_flops = 2.0 * d_in * d_out;
  return l;
}

LayerShape same_shape_layer(const std::string& name, LayerKind kind, int64_t c,
                            std::array<int64_t, 3> size, int64_t weights, double flops) {
  LayerShape l;
  l.name = name;
  l.kind = kind;
  l.in_channels = l.out_channels = c;
  l.in_size = l.out_size = size;
  l.weights = weights;
  l.forward_flops = flops;
  return l;
}

double voxels(std::array<int64_t, 3> s) { return double(s[0]) * s[1] * s[2]; }

}  // namespace

Network alexnet() {
  Network net{"AlexNet", {}};
  auto& L = net.layers;
  std::array<int64_t, 3> s{227, 227, 1};  // {H, W, 1}: the split dimension is H
  auto add = [&](LayerShape l) {
    s = l.out_size;
    L.push_back(std::move(l));
  };
  add(window_layer("conv1", LayerKind::conv, 3, 96, s, 11, 4, 0, 1, true));
  L.back().input_gradient = false;
  add(window_layer("pool1", LayerKind::pool, 96, 96, s, 3, 2, 0));
  add(window_layer("conv2", LayerKind::conv, 96, 256, s, 5, 1, 2, 2, true));
  add(window_layer("pool2", LayerKind::pool, 256, 256, s, 3, 2, 0));
  add(window_layer("conv3", LayerKind::conv, 256, 384, s, 3, 1, 1, 1, true));
  add(window_layer("conv4", LayerKind::conv, 384, 384, s, 3, 1, 1, 2, true));
  add(window_layer("conv5", LayerKind::conv, 384, 256, s, 3, 1, 1, 2, true));
  add(window_layer("pool5", LayerKind::pool, 256, 256, s, 3, 2, 0));
  L.push_back(fc_layer("fc6", 256 * s[0] * s[1], 4096));
  L.push_back(fc_layer("fc7", 4096, 4096));
  L.push_back(fc_layer("fc8", 4096, 1000));
  return net;
}

Network resattnet3d(const ResAttNetShape& a) {
  if (a.depth != 18 && a.depth != 34) throw std::invalid_argument("resattnet3d: depth 18 or 34");
  Network net{"ResAttNet3D-" + std::to_string(a.depth), {}};
  auto& L = net.layers;
  std::array<int64_t, 3> s = a.input;
  // A 3D net: every window is k³, also on a side of one voxel (layer4 at small inputs);
  // window_layer's flat sides are for 2D nets.
  auto window = [](const std::string& name, LayerKind kind, int64_t cin, int64_t cout,
                   std::array<int64_t, 3> in, int64_t k, int64_t st, int64_t p) {
    LayerShape l = window_layer(name, kind, cin, cout, in, k, st, p);
    const double taps = double(k) * k * k, out = voxels(l.out_size);
    if (kind == LayerKind::conv) {
      l.weights = cout * cin * k * k * k;
      l.forward_flops = 2.0 * cout * cin * taps * out;
    } else {
      l.forward_flops = taps * cout * out;
    }
    return l;
  };
  auto bn = [&](const std::string& name, int64_t c) {
    L.push_back(same_shape_layer(name, LayerKind::bn, c, s, 2 * c, 4.0 * c * voxels(s)));
  };
  L.push_back(window("conv1", LayerKind::conv, a.in_channels, a.width, s, 7, 2, 3));
  L.back().input_gradient = false;
  s = L.back().out_size;
  bn("bn1", a.width);
  L.push_back(window("maxpool", LayerKind::pool, a.width, a.width, s, 3, 2, 1));
  s = L.back().out_size;
  const std::array<int, 4> blocks = a.depth == 18 ? std::array<int, 4>{2, 2, 2, 2}
                                                  : std::array<int, 4>{3, 4, 6, 3};
  int64_t c = a.width;
  for (int l = 0; l < 4; ++l) {
    const int64_t out = a.width << l;
    for (int b = 0; b < blocks[l]; ++b) {
      const std::string p = "layer" + std::to_string(l + 1) + "." + std::to_string(b) + ".";
      const int64_t stride = b == 0 && l > 0 ? 2 : 1;
      const int64_t in_c = b == 0 ? c : out;
      const std::array<int64_t, 3> in = s;
      L.push_back(window(p + "conv1", LayerKind::conv, in_c, out, in, 3, stride, 1));
      s = L.back().out_size;
      bn(p + "bn1", out);
      L.push_back(window(p + "conv2", LayerKind::conv, out, out, s, 3, 1, 1));
      bn(p + "bn2", out);
      if (stride != 1 || in_c != out) {
        L.push_back(window(p + "downsample.0", LayerKind::conv, in_c, out, in, 1, stride, 0));
        bn(p + "downsample.1", out);
      }
    }
    c = out;
    if ((l == 2 && a.attention3) || (l == 3 && a.attention4)) {
      // query, key (C -> C/8) and value (C -> C) 1x1x1 convolutions with biases, and gamma.
      const double n = voxels(s);
      const int64_t w = 2 * (c * (c / 8) + c / 8) + c * c + c + 1;
      const double flops = 2.0 * n * (2 * c * (c / 8) + c * c) + 2.0 * n * n * (c / 8 + c);
      L.push_back(same_shape_layer(l == 2 ? "att3" : "att4", LayerKind::attention, c, s, w, flops));
    }
  }
  LayerShape pool = same_shape_layer("avgpool", LayerKind::global_pool, c, s, 0, c * voxels(s));
  pool.out_size = {1, 1, 1};
  L.push_back(pool);
  L.push_back(fc_layer("fc", c, a.classes));
  return net;
}

Network mlp(const std::vector<int64_t>& sizes) {
  if (sizes.size() < 2) throw std::invalid_argument("mlp: need at least two sizes");
  Network net{"MLP", {}};
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    net.layers.push_back(fc_layer("fc" + std::to_string(i + 1), sizes[i], sizes[i + 1]));
  net.layers.front().input_gradient = false;
  return net;
}

// ---- compute ---------------------------------------------------------------------------

double ComputeTable::at(double b) const {
  if (b <= 0 || seconds.empty()) return 0;
  const auto first = seconds.begin();
  const auto last = std::prev(seconds.end());
  if (b <= double(first->first)) return first->second * b / double(first->first);
  if (b >= double(last->first)) return last->second * b / double(last->first);
  const auto hi = seconds.upper_bound(int64_t(std::floor(b)));  // first batch > floor(b)
  const auto lo = std::prev(hi);
  if (double(lo->first) == b) return lo->second;
  const double t = (b - double(lo->first)) / double(hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

double layer_compute_s(const LayerShape& l, double samples, double fraction, const Machine& m) {
  if (m.compute) {
    const auto it = m.compute->find(l.name);
    if (it != m.compute->end() && !it->second.seconds.empty()) {
      const ComputeTable& t = it->second;
      const double scale =
          t.forward_flops > 0 && l.forward_flops > 0 ? l.forward_flops / t.forward_flops : 1.0;
      return t.at(samples) * fraction * scale;
    }
  }
  return m.flops > 0 ? 3.0 * l.forward_flops * samples * fraction / m.flops : 0;
}

// ---- collectives -----------------------------------------------------------------------

namespace {
int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
CommTerm make_term(const std::string& what, double words, double messages, const Machine& m) {
  return {what, words, messages, m.alpha * messages, m.beta * words};
}
}  // namespace

CommTerm all_gather(const std::string& what, double n, int p, const Machine& m) {
  if (p <= 1 || n <= 0) return make_term(what, 0, 0, m);
  return make_term(what, double(p - 1) / p * n, ceil_log2(p), m);
}

CommTerm all_reduce(const std::string& what, double n, int p, const Machine& m) {
  if (p <= 1 || n <= 0) return make_term(what, 0, 0, m);
  return make_term(what, 2.0 * (p - 1) / p * n, 2.0 * ceil_log2(p), m);
}

CommTerm halo(const std::string& what, double volume, const Machine& m) {
  return make_term(what, volume, volume > 0 ? 1 : 0, m);
}

int64_t halo_planes(int64_t d_in, int64_t k, int64_t s, int64_t p, int parts) {
  const int64_t d_out = window_out(d_in, k, s, p);
  auto range = [](int64_t n, int ranks, int r) {  // balanced_range: the first n % ranks get one more
    const int64_t q = n / ranks, rem = n % ranks;
    const int64_t begin = r * q + std::min<int64_t>(r, rem);
    return std::pair<int64_t, int64_t>{begin, begin + q + (r < rem ? 1 : 0)};
  };
  int64_t most = 0;
  for (int r = 0; r < parts; ++r) {
    const auto [o0, o1] = range(d_out, parts, r);
    if (o1 <= o0) continue;
    const int64_t lo = std::max<int64_t>(0, o0 * s - p);
    const int64_t hi = std::min<int64_t>(d_in, (o1 - 1) * s - p + k);
    const auto [i0, i1] = range(d_in, parts, r);
    const int64_t own = std::max<int64_t>(0, std::min(hi, i1) - std::max(lo, i0));
    most = std::max(most, std::max<int64_t>(0, hi - lo) - own);
  }
  return most;
}

// ---- one step on one grid --------------------------------------------------------------

double LayerCost::words() const {
  double w = 0;
  for (const CommTerm& t : terms) w += t.words;
  return w;
}

double LayerCost::comm_s() const {
  double s = 0;
  for (const CommTerm& t : terms) s += t.seconds();
  return s;
}

namespace {

// How the current activation lies on a row of the grid.
enum class Layout { replicated, batch_split, depth_split };

LayerUse use_of(const LayerShape& l, const Strategy& s) {
  if (l.kind == LayerKind::fc) return s.fc == LayerUse::domain ? LayerUse::model : s.fc;
  return s.conv;
}

}  // namespace

namespace {
PlanCost estimate_gridnn(const Network& net, int64_t batch, Grid g, const Machine& m);
}  // namespace

PlanCost estimate(const Network& net, int64_t batch, Grid g, const Machine& m, const Strategy& s) {
  if (g.rows < 1 || g.cols < 1) throw std::invalid_argument("estimate: grid sides must be >= 1");
  if (s.gridnn_runtime) return estimate_gridnn(net, batch, g, m);
  const int P = g.procs(), Pr = g.rows, Pc = g.cols;
  const double per_col = double(batch) / Pc, per_proc = double(batch) / P;
  PlanCost plan;
  plan.grid = g;
  Layout layout = Layout::replicated;
  bool first = true;
  for (const LayerShape& l : net.layers) {
    LayerCost c;
    c.layer = l.name;
    c.use = use_of(l, s);
    auto add = [&c](CommTerm t) {
      if (t.words > 0 || t.messages > 0) c.terms.push_back(std::move(t));
    };
    double samples = per_col, fraction = 1;
    if (c.use == LayerUse::batch) {
      samples = per_proc;
      if (l.kind == LayerKind::bn) {
        add(all_reduce("all-reduce BN sum(x) and count over P (forward)", l.in_channels + 3.0, P, m));
        add(all_reduce("all-reduce BN second-pass sums over P (forward)", 2.0 * l.in_channels, P, m));
        add(all_reduce("all-reduce BN dy sums over P (backward)", 2.0 * l.in_channels, P, m));
      }
      add(all_reduce("all-reduce dW over P", l.weights, P, m));
      layout = Pr > 1 ? Layout::batch_split : Layout::replicated;
    } else if (c.use == LayerUse::model) {
      fraction = 1.0 / Pr;
      const bool moves = l.kind == LayerKind::fc || l.kind == LayerKind::conv ||
                         l.kind == LayerKind::attention;
      if (moves) {
        const double in = per_col * l.in_words();
        if (layout != Layout::replicated && !first) {
          add(all_gather("all-gather input over Pr (forward)", in, Pr, m));
          if (l.input_gradient && !s.paper_convention)
            add(all_gather("reduce-scatter dX over Pr (backward)", in, Pr, m));
        } else if (l.input_gradient) {
          add(all_reduce("all-reduce dX over Pr (backward)", in, Pr, m));
        }
        add(all_gather("all-gather Y over Pr (forward)", per_col * l.out_words(), Pr, m));
      }
      add(all_reduce("all-reduce dW block over Pc", double(l.weights) / Pr, Pc, m));
      layout = Layout::replicated;
    } else {  // domain
      const bool split = Pr > 1 && l.in_size[0] >= Pr && l.out_size[0] >= Pr;
      const double plane = per_col * l.in_channels * l.in_size[1] * l.in_size[2];
      if (!split) {
        if (layout == Layout::depth_split)
          add(all_gather("all-gather depth over Pr (forward)", per_col * l.in_words(), Pr, m));
        layout = Layout::replicated;
      } else {
        fraction = double((l.out_size[0] + Pr - 1) / Pr) / l.out_size[0];
        if (l.kind == LayerKind::conv || l.kind == LayerKind::pool) {
          const double v = plane * halo_planes(l.in_size[0], l.kernel, l.stride, l.padding, Pr);
          add(halo("halo over Pr (forward)", v, m));
          if (l.input_gradient) add(halo("halo gradient over Pr (backward)", v, m));
        } else if (l.kind == LayerKind::attention) {
          const double kv = per_col * (l.in_channels / 8 + l.in_channels) * voxels(l.in_size);
          add(all_gather("all-gather K, V over Pr (forward)", kv, Pr, m));
          add(all_gather("reduce-scatter dK, dV over Pr (backward)", kv, Pr, m));
        } else if (l.kind == LayerKind::global_pool) {
          add(all_reduce("all-reduce partial sums over Pr (forward)", per_col * l.in_channels, Pr, m));
        }
        layout = l.kind == LayerKind::global_pool ? Layout::replicated : Layout::depth_split;
      }
      if (l.kind == LayerKind::bn) {
        add(all_reduce("all-reduce BN sum(x) and count over P (forward)", l.in_channels + 3.0, P, m));
        add(all_reduce("all-reduce BN second-pass sums over P (forward)", 2.0 * l.in_channels, P, m));
        add(all_reduce("all-reduce BN dy sums over P (backward)", 2.0 * l.in_channels, P, m));
      }
      add(all_reduce("all-reduce dW over P", l.weights, P, m));
    }
    c.compute_s = layer_compute_s(l, samples, fraction, m);
    for (const CommTerm& t : c.terms) {
      plan.words += t.words;
      plan.latency_s += t.latency_s;
      plan.bandwidth_s += t.bandwidth_s;
    }
    plan.compute_s += c.compute_s;
    plan.layers.push_back(std::move(c));
    first = false;
  }
  return plan;
}

std::vector<PlanCost> sweep(const Network& net, int64_t batch, int procs, const Machine& m,
                            const Strategy& s) {
  if (procs < 1) throw std::invalid_argument("sweep: procs must be >= 1");
  std::vector<PlanCost> plans;
  for (int r = 1; r <= procs; ++r)
    if (procs % r == 0) plans.push_back(estimate(net, batch, Grid{r, procs / r}, m, s));
  return plans;
}

size_t best_index(const std::vector<PlanCost>& plans) {
  size_t best = 0;
  for (size_t i = 1; i < plans.size(); ++i)
    if (plans[i].total_s() < plans[best].total_s()) best = i;
  return best;
}

double optimal_fc_rows(const Network& net, int64_t batch, int procs, const Strategy& s) {
  double w = 0, gathered = 0, reduced = 0;
  bool replicated = false;  // the first FC layer's input comes from batch or domain layers
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const LayerShape& l = net.layers[i];
    if (l.kind != LayerKind::fc) {
      replicated = l.kind == LayerKind::global_pool;
      continue;
    }
    w += l.weights;
    gathered += l.out_words();
    if (!replicated && i > 0) {
      gathered += l.in_words();
      if (l.input_gradient && !s.paper_convention) gathered += l.in_words();
    } else if (l.input_gradient) {
      reduced += l.in_words();
    }
    replicated = true;
  }
  const double d = (gathered + 2 * reduced) / 3;
  return std::sqrt(2.0 * procs * w / (3.0 * batch * d));
}

// ---- the words of a real run -----------------------------------------------------------

namespace {

struct Span {
  int64_t begin = 0, end = 0;
  int64_t size() const { return std::max<int64_t>(0, end - begin); }
};
// parallel::balanced_range: the first n % parts get one more.
Span balanced(int64_t n, int parts, int r) {
  const int64_t q = n / parts, rem = n % parts;
  const int64_t begin = r * q + std::min<int64_t>(r, rem);
  return {begin, begin + q + (r < rem ? 1 : 0)};
}
Span meet(Span a, Span b) { return {std::max(a.begin, b.begin), std::min(a.end, b.end)}; }

// parallel/halo.cpp's plan for rank r: the input planes it sends to its peers (forward) and
// receives from them (its backward sends).
std::pair<int64_t, int64_t> halo_sent_received(int64_t d_in, int64_t k, int64_t s, int64_t p, int parts, int r) {
  const int64_t d_out = window_out(d_in, k, s, p);
  auto need = [&](int q) {
    const Span o = balanced(d_out, parts, q);
    return meet({o.begin * s - p, (o.end - 1) * s - p + k}, {0, d_in});
  };
  int64_t sent = 0, received = 0;
  for (int q = 0; q < parts; ++q) {
    if (q == r) continue;
    sent += meet(need(q), balanced(d_in, parts, r)).size();
    received += meet(need(r), balanced(d_in, parts, q)).size();
  }
  return {sent, received};
}

}  // namespace

std::vector<CommCall> gridnn_calls(const Network& net, int64_t batch, Grid g, int row, int col) {
  if (g.rows < 1 || g.cols < 1 || row < 0 || row >= g.rows || col < 0 || col >= g.cols)
    throw std::invalid_argument("gridnn_calls: rank (row, col) outside the grid");
  std::vector<CommCall> calls;
  if (g.procs() == 1) return calls;
  const int Pr = g.rows, Pc = g.cols, P = g.procs();
  const int64_t b = balanced(batch, Pc, col).size();  // this batch shard's samples
  auto split = [&](int64_t depth) { return Pr > 1 && depth >= Pr; };
  // n: this rank's elements; words: what it receives (the α–β convention).
  auto call = [&](const std::string& layer, const char* comm, const char* op, int64_t n, int procs,
                  double words) {
    const double log_p = procs > 1 ? ceil_log2(procs) : 0;
    const std::string o = op;
    const double messages = o == "send_recv" ? (words > 0 ? 1 : 0) : o == "all_reduce" ? 2 * log_p : log_p;
    calls.push_back({layer, comm, op, n, procs, words, messages});
  };
  auto reduce = [&](const std::string& layer, const char* comm, int64_t n, int procs) {
    call(layer, comm, "all_reduce", n, procs, 2.0 * (procs - 1) / procs * double(n));
  };
  // A fully connected layer is 1.5D (DistLinear, models/dist/factory.cpp) when the row has
  // several ranks and each gets an output: row block `row` of W and b.
  auto fc_split = [&](const LayerShape& l) { return Pr > 1 && l.out_channels >= Pr; };
  auto fc_block = [&](const LayerShape& l) {
    const int64_t rows = balanced(l.out_channels, Pr, row).size();
    return std::pair<int64_t, int64_t>{rows, rows * (l.weights / l.out_channels)};
  };
  int64_t stage_weights = 0, col_weights = 0;
  for (const LayerShape& l : net.layers) {
    const int64_t d = l.in_size[0], hw = l.in_size[1] * l.in_size[2];
    const int64_t plane = b * l.in_channels * hw;  // one input plane of this shard
    bool on_stage = false;
    switch (l.kind) {
      case LayerKind::conv:
      case LayerKind::pool:
        if (split(d) && split(l.out_size[0])) {
          const auto [sent, received] = halo_sent_received(d, l.kernel, l.stride, l.padding, Pr, row);
          call(l.name, "row", "send_recv", sent * plane, Pr, double(received * plane));
          if (l.input_gradient) call(l.name, "row", "send_recv", received * plane, Pr, double(sent * plane));
          on_stage = true;
        } else if (split(d)) {  // the hand-over: the slabs gathered, the layer replicated
          const int64_t own = balanced(d, Pr, row).size();
          call(l.name + " (gather)", "row", "all_gatherv", own * plane, Pr, double((d - own) * plane));
        }
        break;
      case LayerKind::bn:
        on_stage = split(d);
        // forward: sum(x) with the count's 3 digits, then the [2, C] second-pass sums;
        // backward: one [2, C] (models/dist/batchnorm3d.h).
        for (int64_t n : {l.in_channels + 3, 2 * l.in_channels, 2 * l.in_channels})
          reduce(l.name, on_stage ? "stage" : "col", n, on_stage ? P : Pc);
        break;
      case LayerKind::attention:
        if (split(d)) {
          const int64_t kv = b * hw * (l.in_channels / 8 + l.in_channels);
          const int64_t own = balanced(d, Pr, row).size();
          call(l.name, "row", "all_gatherv", own * kv, Pr, double((d - own) * kv));
          call(l.name, "row", "reduce_scatterv", d * kv, Pr, double((d - own) * kv));
          on_stage = true;
        }
        break;
      case LayerKind::global_pool:
        if (split(d)) reduce(l.name, "row", b * l.in_channels, Pr);
        break;
      case LayerKind::fc:
        if (fc_split(l)) {
          const auto [block, weights] = fc_block(l);
          call(l.name, "row", "all_gatherv", b * block, Pr, double(b * (l.out_channels - block)));
          reduce(l.name, "row", b * l.in_channels, Pr);  // dX, always (DistLinear)
          col_weights += weights;
          continue;
        }
        break;
    }
    (on_stage ? stage_weights : col_weights) += l.weights;
  }
  if (Pc > 1) reduce("loss", "col", 2, Pc);
  if (P > 1 && stage_weights > 0) reduce("gradients", "stage", stage_weights, P);
  if (Pc > 1 && col_weights > 0) reduce("gradients", "col", col_weights, Pc);
  return calls;
}

std::vector<CommCall> gridnn_mlp_calls(const Network& mlp, int64_t batch, std::array<int64_t, 4> in, Grid g,
                                       int row, int col) {
  if (g.rows < 1 || g.cols < 1 || row < 0 || row >= g.rows || col < 0 || col >= g.cols)
    throw std::invalid_argument("gridnn_mlp_calls: rank (row, col) outside the grid");
  std::vector<CommCall> calls;
  if (g.procs() == 1) return calls;
  const int64_t b = balanced(batch, g.cols, col).size();
  const int64_t plane = b * in[0] * in[2] * in[3], own = balanced(in[1], g.rows, row).size();
  if (g.rows > 1)
    calls.push_back({"GatherDepth", "row", "all_gatherv", own * plane, g.rows, double((in[1] - own) * plane),
                     double(ceil_log2(g.rows))});
  // 1.5D layers (Pr > 1 and an output per row rank): the Y blocks all-gathered, dX
  // all-reduced over the row; the blocks' gradients summed over col like the others'.
  int64_t weights = 0;
  const double row_log = double(ceil_log2(g.rows));
  for (const LayerShape& l : mlp.layers) {
    if (g.rows > 1 && l.out_channels >= g.rows) {
      const int64_t block = balanced(l.out_channels, g.rows, row).size();
      calls.push_back({l.name, "row", "all_gatherv", b * block, g.rows, double(b * (l.out_channels - block)), row_log});
      calls.push_back({l.name, "row", "all_reduce", b * l.in_channels, g.rows,
                       2.0 * (g.rows - 1) / g.rows * double(b * l.in_channels), 2 * row_log});
      weights += block * (l.weights / l.out_channels);
    } else {
      weights += l.weights;
    }
  }
  const double reduced = 2.0 * (g.cols - 1) / g.cols, messages = 2.0 * ceil_log2(g.cols);
  if (g.cols > 1) {
    calls.push_back({"loss", "col", "all_reduce", 2, g.cols, reduced * 2, messages});
    calls.push_back({"gradients", "col", "all_reduce", weights, g.cols, reduced * double(weights), messages});
  }
  return calls;
}

namespace {

// The layers of `net` (a "<layer> (gather)" counts to its layer), then "loss" and
// "gradients"; each call's words the most any rank receives in it (every rank makes the same
// calls, in the same order). Compute: 3 x forward FLOPs of the shard's samples, the slab's
// share of the output while the layer is split.
PlanCost estimate_gridnn(const Network& net, int64_t batch, Grid g, const Machine& m) {
  std::vector<std::vector<CommCall>> ranks;
  for (int c = 0; c < g.cols; ++c)
    for (int r = 0; r < g.rows; ++r) ranks.push_back(gridnn_calls(net, batch, g, r, c));
  PlanCost plan;
  plan.grid = g;
  auto owner = [](const std::string& label) {
    const std::string tail = " (gather)";
    return label.size() > tail.size() && label.compare(label.size() - tail.size(), tail.size(), tail) == 0
               ? label.substr(0, label.size() - tail.size())
               : label;
  };
  std::vector<std::string> names;
  for (const LayerShape& l : net.layers) names.push_back(l.name);
  names.push_back("loss");
  names.push_back("gradients");
  const double per_col = double(batch) / g.cols;
  for (const std::string& name : names) {
    LayerCost c;
    c.layer = name;
    c.use = LayerUse::domain;
    for (size_t i = 0; i < ranks.front().size(); ++i) {
      const CommCall& first = ranks.front()[i];
      if (owner(first.layer) != name) continue;
      double words = 0, messages = 0;
      for (const auto& calls : ranks) {
        words = std::max(words, calls[i].words);
        messages = std::max(messages, calls[i].messages);
      }
      if (words > 0 || messages > 0)
        c.terms.push_back(make_term(first.op + " over " + first.comm + " (" + first.layer + ")", words, messages, m));
    }
    for (const LayerShape& l : net.layers) {
      if (l.name != name) continue;
      const bool split = g.rows > 1 && l.in_size[0] >= g.rows &&
                         (l.kind == LayerKind::bn || l.kind == LayerKind::attention ||
                          l.kind == LayerKind::global_pool || l.out_size[0] >= g.rows);
      const double fraction = split ? double((l.out_size[0] + g.rows - 1) / g.rows) / l.out_size[0] : 1;
      c.compute_s = layer_compute_s(l, per_col, fraction, m);
    }
    for (const CommTerm& t : c.terms) {
      plan.words += t.words;
      plan.latency_s += t.latency_s;
      plan.bandwidth_s += t.bandwidth_s;
    }
    plan.compute_s += c.compute_s;
    plan.layers.push_back(std::move(c));
  }
  return plan;
}

}  // namespace

std::map<CommKey, int64_t> comm_elements(const std::vector<CommCall>& calls) {
  std::map<CommKey, int64_t> out;
  for (const CommCall& c : calls) out[{c.layer, c.comm, c.op}] += c.elements;
  return out;
}

}  // namespace gridnn::plan
