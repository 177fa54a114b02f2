// The α–β cost model: the networks' layer shapes, each layer's terms for its use of the grid,
// and the sweep over grids (conventions in cost_model.h).
#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include "parallel/halo.h"

namespace gridnn::plan {

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

// ---- the networks ----------------------------------------------------------------------

namespace {

int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

// A convolution (groups g, bias or not) or pooling window over a cube-or-square input: every
// spatial side uses the same window, except sides of size 1 (the third side of a 2D net).
LayerShape window_layer(const std::string& name, LayerKind kind, int64_t cin, int64_t cout, std::array<int64_t, 3> in,
                        int64_t k, int64_t s, int64_t p, int64_t groups = 1, bool bias = false) {
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
    const int64_t cin_per_group = cin / groups;
    l.weights = cout * cin_per_group * taps + (bias ? cout : 0);
    l.forward_flops = 2.0 * cout * cin_per_group * taps * out_voxels;
  } else {
    l.forward_flops = double(taps) * cout * out_voxels;
  }
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

// ---- compute ---------------------------------------------------------------------------

double seconds_at(const BatchSeconds& seconds, double local_batch) {
  if (local_batch <= 0 || seconds.empty()) return 0;
  const auto first = seconds.begin();
  const auto last = std::prev(seconds.end());
  if (local_batch <= double(first->first)) return first->second * local_batch / double(first->first);
  if (local_batch >= double(last->first)) return last->second * local_batch / double(last->first);
  const auto hi = seconds.upper_bound(int64_t(std::floor(local_batch)));  // first batch > floor(local_batch)
  const auto lo = std::prev(hi);
  if (double(lo->first) == local_batch) return lo->second;
  const double t = (local_batch - double(lo->first)) / double(hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

bool SlabTable::matches(const LayerShape& l) const {
  return in_size == l.in_size && out_size == l.out_size &&
         std::abs(forward_flops - l.forward_flops) <= 1e-9 * std::max(1.0, std::abs(l.forward_flops));
}

double layer_compute_s(const LayerShape& l, double samples, double fraction, const Machine& m) {
  if (m.compute) {
    const auto it = m.compute->find(l.name);
    if (it != m.compute->end() && !it->second.seconds.empty()) {
      const ComputeTable& t = it->second;
      for (const SlabTable& slab : t.slabs)
        if (slab.matches(l)) return seconds_at(slab.seconds, samples) * fraction;
      const double scale = t.forward_flops > 0 && l.forward_flops > 0 ? l.forward_flops / t.forward_flops : 1.0;
      return t.at(samples) * fraction * scale;
    }
  }
  return m.flops > 0 ? 3.0 * l.forward_flops * samples * fraction / m.flops : 0;
}

OpLink Link::of(const std::string& op) const {
  const auto it = ops.find(op);
  return it != ops.end() ? it->second : OpLink{alpha, beta};
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
// `m` with the α and β of one communicator.
Machine on_link(Machine m, const Link& link) {
  m.alpha = link.alpha;
  m.beta = link.beta;
  return m;
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
  int64_t most = 0;
  for (int r = 0; r < parts; ++r) {
    const parallel::DepthHalo h = parallel::plan_depth_halo("halo_planes", d_in, {k, s, p}, parts, r);
    int64_t received = 0;
    for (const parallel::PlaneTransfer& t : h.receives) received += t.planes.size();
    most = std::max(most, received);
  }
  return most;
}

// ---- one step on one grid --------------------------------------------------------------

double LayerCost::words() const {
  double w = 0;
  for (const CommTerm& t : terms) w += t.words;
  return w;
}

void PlanCost::add(LayerCost layer) {
  for (const CommTerm& t : layer.terms) {
    words += t.words;
    latency_s += t.latency_s;
    bandwidth_s += t.bandwidth_s;
  }
  compute_s += layer.compute_s;
  layers.push_back(std::move(layer));
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

PlanCost estimate(const Network& net, int64_t batch, Grid g, const Machine& m, const Strategy& s) {
  return estimate(net, batch, g, m, s, Links::flat(m));
}

PlanCost estimate(const Network& net, int64_t batch, Grid g, const Machine& m, const Strategy& s, const Links& links) {
  if (g.rows < 1 || g.cols < 1) throw std::invalid_argument("estimate: grid sides must be >= 1");
  // The terms over Pr run on the row communicator, over Pc on col, over P on world.
  const Machine row = on_link(m, links.row), col = on_link(m, links.col), world = on_link(m, links.world);
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
        add(all_reduce("all-reduce BN sum(x) and count over P (forward)", l.in_channels + 3.0, P, world));
        add(all_reduce("all-reduce BN second-pass sums over P (forward)", 2.0 * l.in_channels, P, world));
        add(all_reduce("all-reduce BN dy sums over P (backward)", 2.0 * l.in_channels, P, world));
      }
      add(all_reduce("all-reduce dW over P", l.weights, P, world));
      layout = Pr > 1 ? Layout::batch_split : Layout::replicated;
    } else if (c.use == LayerUse::model) {
      fraction = 1.0 / Pr;
      const bool moves = l.kind == LayerKind::fc || l.kind == LayerKind::conv || l.kind == LayerKind::attention;
      if (moves) {
        const double in = per_col * l.in_words();
        if (layout != Layout::replicated && !first) {
          add(all_gather("all-gather input over Pr (forward)", in, Pr, row));
          if (l.input_gradient && !s.paper_convention)
            add(all_gather("reduce-scatter dX over Pr (backward)", in, Pr, row));
        } else if (l.input_gradient) {
          add(all_reduce("all-reduce dX over Pr (backward)", in, Pr, row));
        }
        add(all_gather("all-gather Y over Pr (forward)", per_col * l.out_words(), Pr, row));
      }
      add(all_reduce("all-reduce dW block over Pc", double(l.weights) / Pr, Pc, col));
      layout = Layout::replicated;
    } else {  // domain
      const bool split = Pr > 1 && l.in_size[0] >= Pr && l.out_size[0] >= Pr;
      const double plane = per_col * l.in_channels * l.in_size[1] * l.in_size[2];
      if (!split) {
        if (layout == Layout::depth_split)
          add(all_gather("all-gather depth over Pr (forward)", per_col * l.in_words(), Pr, row));
        layout = Layout::replicated;
      } else {
        const int64_t most_planes = (l.out_size[0] + Pr - 1) / Pr;  // the largest slab of the output
        fraction = double(most_planes) / l.out_size[0];
        if (l.kind == LayerKind::conv || l.kind == LayerKind::pool) {
          const double v = plane * halo_planes(l.in_size[0], l.kernel, l.stride, l.padding, Pr);
          add(halo("halo over Pr (forward)", v, row));
          if (l.input_gradient) add(halo("halo gradient over Pr (backward)", v, row));
        } else if (l.kind == LayerKind::attention) {
          const int64_t key_channels = l.in_channels / 8;
          const double kv = per_col * (key_channels + l.in_channels) * voxels(l.in_size);
          add(all_gather("all-gather K, V over Pr (forward)", kv, Pr, row));
          add(all_gather("reduce-scatter dK, dV over Pr (backward)", kv, Pr, row));
        } else if (l.kind == LayerKind::global_pool) {
          add(all_reduce("all-reduce partial sums over Pr (forward)", per_col * l.in_channels, Pr, row));
        }
        layout = l.kind == LayerKind::global_pool ? Layout::replicated : Layout::depth_split;
      }
      if (l.kind == LayerKind::bn) {
        add(all_reduce("all-reduce BN sum(x) and count over P (forward)", l.in_channels + 3.0, P, world));
        add(all_reduce("all-reduce BN second-pass sums over P (forward)", 2.0 * l.in_channels, P, world));
        add(all_reduce("all-reduce BN dy sums over P (backward)", 2.0 * l.in_channels, P, world));
      }
      add(all_reduce("all-reduce dW over P", l.weights, P, world));
    }
    c.compute_s = layer_compute_s(l, samples, fraction, m);
    plan.add(std::move(c));
    first = false;
  }
  return plan;
}

std::vector<PlanCost> sweep(const Network& net, int64_t batch, int procs, const Machine& m, const Strategy& s) {
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

CommCall make_call(const std::string& layer, const std::string& comm, const std::string& op, int64_t elements,
                   int procs, double received) {
  const double log_p = procs > 1 ? ceil_log2(procs) : 0;
  CommCall c{layer, comm, op, elements, procs, received, log_p};
  if (op == "all_reduce") {
    c.words = procs > 1 ? 2.0 * (procs - 1) / procs * double(elements) : 0;
    c.messages = 2 * log_p;
  } else if (op == "send_recv") {
    c.messages = received > 0 ? 1 : 0;
  }
  return c;
}

namespace {
int64_t samples_of(const LayerShape& l, const RankStep& r) { return l.samples > 0 ? l.samples : r.samples; }
}  // namespace

PlanCost estimate_ranks(const std::vector<RankStep>& ranks, Grid g, const Machine& m) {
  return estimate_ranks(ranks, g, m, Links::flat(m));
}

PlanCost estimate_ranks(const std::vector<RankStep>& ranks, Grid g, const Machine& m, const Links& links) {
  if (ranks.empty()) throw std::invalid_argument("estimate_ranks: no ranks described");
  PlanCost plan;
  plan.grid = g;
  auto owner = [](const std::string& label) {
    const std::string tail = " (gather)";
    return label.size() > tail.size() && label.compare(label.size() - tail.size(), tail.size(), tail) == 0
               ? label.substr(0, label.size() - tail.size())
               : label;
  };
  auto link_of = [&links](const std::string& comm) {
    return comm == "row" ? links.row : comm == "col" ? links.col : links.world;
  };
  const RankStep& first = ranks.front();
  for (const RankStep& r : ranks)
    if (r.calls.size() != first.calls.size() || r.layers.size() != first.layers.size())
      throw std::invalid_argument("estimate_ranks: the ranks describe different steps");
  std::vector<std::string> names;
  for (const LayerShape& l : first.layers) names.push_back(l.name);
  // Calls of modules that are no layer of their own (a distribution switch) count too.
  for (const CommCall& call : first.calls)
    if (call.layer != "loss" && call.layer != "gradients" &&
        std::find(names.begin(), names.end(), owner(call.layer)) == names.end())
      names.push_back(owner(call.layer));
  names.push_back("loss");
  names.push_back("gradients");
  for (const std::string& name : names) {
    LayerCost c;
    c.layer = name;
    c.use = LayerUse::domain;
    for (size_t i = 0; i < first.calls.size(); ++i) {
      const CommCall& call = first.calls[i];
      if (owner(call.layer) != name) continue;
      double words = 0, messages = 0;
      for (const RankStep& r : ranks) {
        words = std::max(words, r.calls[i].words);
        messages = std::max(messages, r.calls[i].messages);
      }
      const OpLink op = link_of(call.comm).of(call.op);
      if (words > 0 || messages > 0)
        c.terms.push_back(make_term(call.op + " over " + call.comm + " (" + call.layer + ")", words, messages,
                                    on_link(m, Link{op.alpha, op.beta})));
    }
    for (size_t i = 0; i < first.layers.size(); ++i) {
      if (first.layers[i].name != name) continue;
      for (const RankStep& r : ranks)
        c.compute_s = std::max(c.compute_s, layer_compute_s(r.layers[i], double(samples_of(r.layers[i], r)), 1.0, m));
    }
    plan.add(std::move(c));
  }
  return plan;
}

Network network_of(const RankStep& step, const std::string& name) { return Network{name, step.layers}; }

std::map<CommKey, int64_t> comm_elements(const std::vector<CommCall>& calls) {
  std::map<CommKey, int64_t> out;
  for (const CommCall& c : calls) out[{c.layer, c.comm, c.op}] += c.elements;
  return out;
}

}  // namespace gridnn::plan
