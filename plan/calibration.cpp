// Calibration: the α–β fit, its JSON form, and the timing of collectives on a communicator
// (conventions in calibration.h).
#include "plan/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace gridnn::plan {

namespace {
int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
}  // namespace

std::pair<double, double> model_messages_words(const std::string& op, int p, int64_t elements) {
  if (p <= 1 || elements <= 0) return {0, 0};
  const double part = double(p - 1) / p * double(elements), logp = ceil_log2(p);
  if (op == "all_reduce") return {2 * logp, 2 * part};
  if (op == "all_gather" || op == "reduce_scatter") return {logp, part};
  if (op == "pingpong") return {1, double(elements)};
  if (op == "halo") return {1, double(elements) * (p > 2 ? 2 : 1)};
  throw Error("calibration: unknown operation \"" + op +
              "\" (all_reduce, all_gather, reduce_scatter, pingpong or halo)");
}

// ---- the fit ---------------------------------------------------------------------------

CommFit fit_alpha_beta(const std::vector<CommSample>& samples) {
  // Weighted least squares on t = α m + β w with weights 1/t²: the normal equations of
  // min Σ (α m/t + β w/t − 1)².
  struct Row {
    double m, w;
  };
  std::vector<Row> rows;
  for (const CommSample& s : samples) {
    const auto [m, w] = model_messages_words(s.op, s.procs, s.elements);
    if (m <= 0 && w <= 0) continue;
    GRIDNN_REQUIRE(s.seconds > 0 && std::isfinite(s.seconds), "calibration: sample ", s.op, " of ", s.elements,
                   " elements on ", s.procs, " ranks has time ", s.seconds, " s; every time must be finite and > 0");
    rows.push_back({m / s.seconds, w / s.seconds});
  }
  double mm = 0, mw = 0, ww = 0, m1 = 0, w1 = 0;
  for (const Row& r : rows) {
    mm += r.m * r.m;
    mw += r.m * r.w;
    ww += r.w * r.w;
    m1 += r.m;
    w1 += r.w;
  }
  const double det = mm * ww - mw * mw;
  GRIDNN_REQUIRE(rows.size() >= 2 && det > 1e-12 * mm * ww,
                 "calibration: the fit of alpha and beta "
                 "needs samples at two or more sizes on more than one rank (got ",
                 rows.size(), " usable of ", samples.size(), "); give more --sizes");
  CommFit fit;
  fit.alpha = (m1 * ww - w1 * mw) / det;
  fit.beta = (w1 * mm - m1 * mw) / det;
  if (fit.alpha < 0 || fit.beta < 0) {  // the best fit on the boundary α = 0 or β = 0
    const double beta_only = w1 / ww, alpha_only = m1 / mm;
    auto loss = [&](double a, double b) {
      double e = 0;
      for (const Row& r : rows) e += (a * r.m + b * r.w - 1) * (a * r.m + b * r.w - 1);
      return e;
    };
    if (loss(0, beta_only) <= loss(alpha_only, 0))
      fit = {0, beta_only, 0, {}};
    else
      fit = {alpha_only, 0, 0, {}};
  }
  double e = 0;
  for (const Row& r : rows) e += (fit.alpha * r.m + fit.beta * r.w - 1) * (fit.alpha * r.m + fit.beta * r.w - 1);
  fit.residual = std::sqrt(e / double(rows.size()));
  fit.samples = samples;
  return fit;
}

std::vector<std::string> call_ops(const std::string& sample_op) {
  if (sample_op == "all_reduce") return {"all_reduce"};
  if (sample_op == "all_gather") return {"all_gatherv", "all_gather"};
  if (sample_op == "reduce_scatter") return {"reduce_scatterv"};
  if (sample_op == "halo") return {"send_recv"};
  return {};
}

KindFit fit_per_op(const std::vector<CommSample>& samples) {
  KindFit kind;
  static_cast<CommFit&>(kind) = fit_alpha_beta(samples);
  std::map<std::string, std::vector<CommSample>> by_op;
  for (const CommSample& s : samples)
    if (!call_ops(s.op).empty()) by_op[s.op].push_back(s);
  for (const auto& [op, own] : by_op) {
    try {
      CommFit fit = fit_alpha_beta(own);
      fit.samples.clear();  // the kind holds them
      kind.ops[op] = std::move(fit);
    } catch (const Error&) {  // one size of it only: the kind's α and β cost its calls
    }
  }
  return kind;
}

// ---- JSON ------------------------------------------------------------------------------

using nlohmann::json;

std::string calibration_to_json(const Calibration& c) {
  json j;
  j["format"] = "gridnn-calibration";
  j["version"] = 1;
  j["machine"] = c.machine;
  j["date"] = c.date;
  j["grid"] = c.grid;
  j["procs"] = c.procs;
  j["model"] = c.model;
  json comm = json::object();
  for (const auto& [kind, f] : c.comm) {
    json samples = json::array();
    for (const CommSample& s : f.samples)
      samples.push_back({{"op", s.op}, {"procs", s.procs}, {"elements", s.elements}, {"seconds", s.seconds}});
    comm[kind] = {{"alpha", f.alpha}, {"beta", f.beta}, {"residual", f.residual}, {"samples", samples}};
    json ops = json::object();
    for (const auto& [op, g] : f.ops) ops[op] = {{"alpha", g.alpha}, {"beta", g.beta}, {"residual", g.residual}};
    comm[kind]["ops"] = ops;
  }
  j["comm"] = comm;
  auto rows = [](const BatchSeconds& seconds) {
    json out = json::array();
    for (const auto& [b, s] : seconds) out.push_back({{"batch", b}, {"seconds", s}});
    return out;
  };
  json compute = json::object();
  for (const auto& [layer, t] : c.compute) {
    compute[layer] = {{"forward_flops", t.forward_flops}, {"seconds", rows(t.seconds)}};
    if (t.slabs.empty()) continue;
    json slabs = json::array();
    for (const SlabTable& slab : t.slabs)
      slabs.push_back({{"in_size", slab.in_size},
                       {"out_size", slab.out_size},
                       {"forward_flops", slab.forward_flops},
                       {"seconds", rows(slab.seconds)}});
    compute[layer]["slabs"] = slabs;
  }
  j["compute"] = compute;
  return j.dump(2) + "\n";
}

namespace {

// Field access that names the file and the field's path on failure.
struct Reader {
  std::string source;
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(source + ": " + field + ": " + what);
  }
  const json& at(const json& j, const std::string& path, const std::string& key) const {
    const std::string field = path.empty() ? key : path + "." + key;
    if (!j.is_object() || !j.contains(key)) fail(field, "missing");
    return j.at(key);
  }
  double number(const json& j, const std::string& path, const std::string& key, bool positive = false) const {
    const json& v = at(j, path, key);
    const std::string field = path.empty() ? key : path + "." + key;
    if (!v.is_number()) fail(field, "expected a number, got " + v.dump());
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0 || (positive && d == 0))
      fail(field, std::string("expected a finite number ") + (positive ? "> 0" : ">= 0") + ", got " + v.dump());
    return d;
  }
  int64_t integer(const json& j, const std::string& path, const std::string& key, int64_t least) const {
    const json& v = at(j, path, key);
    const std::string field = path.empty() ? key : path + "." + key;
    if (!v.is_number_integer() || v.get<int64_t>() < least)
      fail(field, "expected an integer >= " + std::to_string(least) + ", got " + v.dump());
    return v.get<int64_t>();
  }
  std::string text(const json& j, const std::string& path, const std::string& key) const {
    const json& v = at(j, path, key);
    if (!v.is_string()) fail(path.empty() ? key : path + "." + key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  const json& object(const json& j, const std::string& path, const std::string& key) const {
    const json& v = at(j, path, key);
    if (!v.is_object()) fail(path.empty() ? key : path + "." + key, "expected an object, got " + v.dump());
    return v;
  }
  const json& array(const json& j, const std::string& path, const std::string& key) const {
    const json& v = at(j, path, key);
    if (!v.is_array()) fail(path.empty() ? key : path + "." + key, "expected an array, got " + v.dump());
    return v;
  }
  // {D, H, W}, each >= 1.
  std::array<int64_t, 3> size3(const json& j, const std::string& path, const std::string& key) const {
    const json& v = array(j, path, key);
    std::array<int64_t, 3> out{};
    if (v.size() != 3) fail(path + "." + key, "expected [D, H, W], got " + v.dump());
    for (size_t i = 0; i < 3; ++i) {
      if (!v[i].is_number_integer() || v[i].get<int64_t>() < 1)
        fail(path + "." + key, "expected [D, H, W] of integers >= 1, got " + v.dump());
      out[i] = v[i].get<int64_t>();
    }
    return out;
  }
  // "seconds": [{batch, seconds}, ...], at least one, each batch once.
  BatchSeconds batch_seconds(const json& j, const std::string& path) const {
    const json& rows = array(j, path, "seconds");
    BatchSeconds out;
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string p = path + ".seconds[" + std::to_string(i) + "]";
      const int64_t b = integer(rows[i], p, "batch", 1);
      if (out.count(b)) fail(p + ".batch", "batch " + std::to_string(b) + " listed twice");
      out[b] = number(rows[i], p, "seconds", true);
    }
    if (out.empty()) fail(path + ".seconds", "expected at least one {batch, seconds}");
    return out;
  }
};

}  // namespace

Calibration calibration_from_json(const std::string& text, const std::string& source) {
  const Reader r{source};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON (" + e.what() + "); rerun gridnn-calibrate to write it again");
  }
  if (!j.is_object()) r.fail("(top level)", "expected an object");
  if (r.text(j, "", "format") != "gridnn-calibration")
    r.fail("format", "expected \"gridnn-calibration\" (a file written by gridnn-calibrate)");
  if (r.integer(j, "", "version", 0) != 1) r.fail("version", "expected 1");
  Calibration c;
  c.machine = r.text(j, "", "machine");
  c.date = r.text(j, "", "date");
  c.grid = r.text(j, "", "grid");
  c.procs = int(r.integer(j, "", "procs", 1));
  c.model = r.text(j, "", "model");
  for (const auto& [kind, f] : r.object(j, "", "comm").items()) {
    const std::string path = "comm." + kind;
    KindFit fit;
    fit.alpha = r.number(f, path, "alpha");
    fit.beta = r.number(f, path, "beta");
    fit.residual = r.number(f, path, "residual");
    const json& samples = r.array(f, path, "samples");
    for (size_t i = 0; i < samples.size(); ++i) {
      const std::string p = path + ".samples[" + std::to_string(i) + "]";
      CommSample s;
      s.op = r.text(samples[i], p, "op");
      s.procs = int(r.integer(samples[i], p, "procs", 1));
      s.elements = r.integer(samples[i], p, "elements", 0);
      s.seconds = r.number(samples[i], p, "seconds");
      try {
        model_messages_words(s.op, s.procs, s.elements);
      } catch (const Error& e) {
        r.fail(p + ".op", e.what());
      }
      fit.samples.push_back(s);
    }
    if (f.contains("ops")) {
      for (const auto& [op, g] : r.object(f, path, "ops").items()) {
        const std::string p = path + ".ops." + op;
        if (call_ops(op).empty()) r.fail(p, "expected all_reduce, all_gather, reduce_scatter or halo");
        fit.ops[op] = {r.number(g, p, "alpha"), r.number(g, p, "beta"), r.number(g, p, "residual"), {}};
      }
    } else {  // written before the per-operation fits: fitted here from the samples
      try {
        fit.ops = fit_per_op(fit.samples).ops;
      } catch (const Error&) {  // too few samples for even the kind's fit: its stored α and β serve
      }
    }
    c.comm[kind] = std::move(fit);
  }
  for (const auto& [layer, t] : r.object(j, "", "compute").items()) {
    const std::string path = "compute." + layer;
    ComputeTable table;
    table.forward_flops = r.number(t, path, "forward_flops");
    table.seconds = r.batch_seconds(t, path);
    if (t.contains("slabs")) {  // a calibration on a grid with rows
      const json& slabs = r.array(t, path, "slabs");
      for (size_t i = 0; i < slabs.size(); ++i) {
        const std::string p = path + ".slabs[" + std::to_string(i) + "]";
        SlabTable slab;
        slab.in_size = r.size3(slabs[i], p, "in_size");
        slab.out_size = r.size3(slabs[i], p, "out_size");
        slab.forward_flops = r.number(slabs[i], p, "forward_flops");
        slab.seconds = r.batch_seconds(slabs[i], p);
        table.slabs.push_back(std::move(slab));
      }
    }
    c.compute[layer] = std::move(table);
  }
  return c;
}

Calibration read_calibration(const std::string& path) {
  std::ifstream in(path);
  GRIDNN_REQUIRE(in, path,
                 ": cannot open the calibration file; write one with "
                 "`mpiexec -n P gridnn-calibrate --grid PrxPc --out ",
                 path, "`");
  std::stringstream text;
  text << in.rdbuf();
  return calibration_from_json(text.str(), path);
}

void write_calibration(const Calibration& c, const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    GRIDNN_REQUIRE(out, path, ": cannot write ", tmp, " (does the folder exist and is it writable?)");
    out << calibration_to_json(c);
    out.flush();
    GRIDNN_REQUIRE(out, path, ": writing ", tmp, " failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename " + tmp + " to it");
  }
}

Machine machine_from(const Calibration& c, const std::string& kind, const Machine& base) {
  Machine m = base;
  if (!kind.empty()) {
    const auto it = c.comm.find(kind);
    if (it == c.comm.end()) {
      std::string have;
      for (const auto& [k, f] : c.comm) have += (have.empty() ? "" : ", ") + k;
      throw Error("calibration: no communicator kind \"" + kind + "\" (the file has: " +
                  (have.empty() ? std::string("none, it was measured on one process") : have) + ")");
    }
    m.alpha = it->second.alpha;
    m.beta = it->second.beta;
    m.ops.clear();
    for (const auto& [op, f] : it->second.ops)
      for (const std::string& call : call_ops(op)) m.ops[call] = {f.alpha, f.beta};
  }
  if (!c.compute.empty()) m.compute = std::make_shared<const ComputeTables>(c.compute);
  return m;
}

// ---- measurement -----------------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

namespace {

using Clock = std::chrono::steady_clock;

// The buffers of one operation at one size, and a call that runs it once.
struct OpRun {
  Tensor a, b, c, d;
  std::vector<int64_t> rows;
  int64_t elements = 0;  // n in the model's convention (rounded to what actually moves)
};

OpRun prepare(parallel::Communicator& comm, const std::string& op, int64_t n) {
  const int p = comm.size();
  OpRun r;
  r.elements = n;
  if (op == "all_reduce" || op == "pingpong" || op == "halo") {
    r.a = Tensor::zeros(Shape{n});
    r.b = Tensor::zeros(Shape{n});
    r.c = Tensor::zeros(Shape{n});
    r.d = Tensor::zeros(Shape{n});
  } else if (op == "all_gather" || op == "reduce_scatter") {
    const int64_t part = std::max<int64_t>(1, n / p);
    r.elements = part * p;
    r.a = Tensor::zeros(Shape{op == "all_gather" ? part : r.elements});
    r.b = Tensor::zeros(Shape{op == "all_gather" ? r.elements : part});
  } else {
    model_messages_words(op, p, n);  // throws the unknown-operation error
  }
  return r;
}

void run_once(parallel::Communicator& comm, const std::string& op, OpRun& r) {
  const int p = comm.size(), me = comm.rank();
  if (op == "all_reduce") {
    comm.all_reduce(r.a);
  } else if (op == "all_gather") {
    comm.all_gather(r.a, r.b);
  } else if (op == "reduce_scatter") {
    comm.reduce_scatter(r.a, r.b);
  } else if (op == "pingpong") {
    Tensor none;
    if (me == 0) {
      comm.send_recv(r.a, 1, none, -1, 71);
      comm.send_recv(none, -1, r.b, 1, 72);
    } else if (me == 1) {
      comm.send_recv(none, -1, r.b, 0, 71);
      comm.send_recv(r.a, 0, none, -1, 72);
    }
  } else if (op == "halo") {  // rightwards, then leftwards, on the chain 0 - 1 - ... - p-1
    Tensor none;
    const bool left = me > 0, right = me + 1 < p;
    comm.send_recv(right ? r.a : none, right ? me + 1 : -1, left ? r.b : none, left ? me - 1 : -1, 73);
    comm.send_recv(left ? r.c : none, left ? me - 1 : -1, right ? r.d : none, right ? me + 1 : -1, 74);
  }
}

}  // namespace

std::vector<CommSample> time_comm_op(parallel::Communicator& comm, const std::string& op,
                                     const std::vector<int64_t>& sizes, const TimingOptions& o) {
  GRIDNN_REQUIRE(o.reps >= 1 && o.warmup >= 0, "calibration: reps must be >= 1 and warm-up >= 0 (got ", o.reps, ", ",
                 o.warmup, ")");
  GRIDNN_REQUIRE((op != "pingpong" && op != "halo") || comm.size() >= 2, "calibration: ", op, " on the ", comm.name(),
                 " communicator needs at least 2 ranks, it has ", comm.size());
  std::vector<CommSample> out;
  std::vector<float> medians;
  for (int64_t n : sizes) {
    GRIDNN_REQUIRE(n >= 1, "calibration: sizes must be >= 1 element, got ", n);
    OpRun r = prepare(comm, op, n);
    for (int i = 0; i < o.warmup; ++i) run_once(comm, op, r);
    std::vector<double> times;
    for (int i = 0; i < o.reps; ++i) {
      comm.barrier();
      const auto start = Clock::now();
      run_once(comm, op, r);
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    // Ping-pong: half the round trip that rank 0 saw (rank 1 and the others report 0).
    double t = median(times);
    if (op == "pingpong") t = comm.rank() == 0 ? t / 2 : 0;
    medians.push_back(float(t));
    out.push_back({op, comm.size(), r.elements, 0});
  }
  if (!medians.empty()) {
    Tensor worst = Tensor::from_vector(medians, Shape{int64_t(medians.size())});
    comm.all_reduce(worst, parallel::ReduceOp::max);
    const std::vector<float> w = worst.to_vector<float>();
    for (size_t i = 0; i < out.size(); ++i) out[i].seconds = double(w[i]);
  }
  return out;
}

}  // namespace gridnn::plan
