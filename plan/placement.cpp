// Pipeline placement: validation, the GPipe event simulation that scores a placement, and the
// three JSON files (profile, cluster, placement; docs/placement.md). Rules in placement.h.
#include "plan/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace gridnn::plan {

using Json = nlohmann::ordered_json;

Cluster uniform_cluster(int devices, double latency_s, double bandwidth, double memory_bytes) {
  GRIDNN_REQUIRE(devices >= 1, "uniform_cluster: devices must be >= 1, got ", devices);
  Cluster c;
  for (int d = 0; d < devices; ++d) c.devices.push_back({"device" + std::to_string(d), 1.0, memory_bytes});
  c.latency_s.assign(size_t(devices), std::vector<double>(size_t(devices), latency_s));
  c.bandwidth.assign(size_t(devices), std::vector<double>(size_t(devices), bandwidth));
  return c;
}

// ---- validation -----------------------------------------------------------------------

void validate(const Profile& profile) {
  GRIDNN_REQUIRE(!profile.blocks.empty(), "profile: \"blocks\" is empty; give at least one block");
  GRIDNN_REQUIRE(profile.micro_batches >= 1, "profile: \"micro_batches\" must be >= 1, got ", profile.micro_batches);
  std::set<std::string> names;
  for (size_t i = 0; i < profile.blocks.size(); ++i) {
    const BlockProfile& b = profile.blocks[i];
    const std::string at = "profile: blocks[" + std::to_string(i) + "]";
    GRIDNN_REQUIRE(!b.name.empty(), at, ".name is empty");
    GRIDNN_REQUIRE(names.insert(b.name).second, at, ".name \"", b.name,
                   "\" is used twice; block names must be distinct");
    const std::pair<const char*, double> fields[] = {{"forward_s", b.forward_s},
                                                     {"backward_s", b.backward_s},
                                                     {"activation_bytes", b.activation_bytes},
                                                     {"memory_bytes", b.memory_bytes},
                                                     {"stash_bytes", b.stash_bytes}};
    for (const auto& [field, value] : fields)
      GRIDNN_REQUIRE(std::isfinite(value) && value >= 0, at, ".", field, " must be a finite number >= 0, got ", value);
  }
}

void validate(const Cluster& cluster) {
  const size_t n = cluster.devices.size();
  GRIDNN_REQUIRE(n >= 1, "cluster: \"devices\" is empty; give at least one device");
  for (size_t d = 0; d < n; ++d) {
    const Device& dev = cluster.devices[d];
    const std::string at = "cluster: devices[" + std::to_string(d) + "]";
    GRIDNN_REQUIRE(std::isfinite(dev.speed) && dev.speed > 0, at, ".speed must be > 0, got ", dev.speed);
    GRIDNN_REQUIRE(dev.memory_bytes >= 0, at, ".memory_bytes must be >= 0 (0: unlimited), got ", dev.memory_bytes);
  }
  const std::pair<const char*, const std::vector<std::vector<double>>*> matrices[] = {
      {"latency_s", &cluster.latency_s}, {"bandwidth", &cluster.bandwidth}};
  for (const auto& [field, m] : matrices) {
    GRIDNN_REQUIRE(m->size() == n, "cluster: \"", field, "\" has ", m->size(), " rows; it needs one per device (", n,
                   ")");
    for (size_t i = 0; i < n; ++i) {
      GRIDNN_REQUIRE((*m)[i].size() == n, "cluster: \"", field, "\"[", i, "] has ", (*m)[i].size(),
                     " entries; it needs one per device (", n, ")");
      for (size_t j = 0; j < n; ++j) {
        if (i == j) continue;
        const double v = (*m)[i][j];
        const bool ok = std::string(field) == "latency_s" ? v >= 0 && std::isfinite(v) : v > 0;
        GRIDNN_REQUIRE(ok, "cluster: \"", field, "\"[", i, "][", j, "] = ", v, " must be ",
                       std::string(field) == "latency_s" ? ">= 0 seconds" : "> 0 bytes/s");
      }
    }
  }
}

void validate(const Placement& p, int blocks_total, int devices, const std::vector<std::string>& block_names) {
  const int k_total = p.partitions();
  GRIDNN_REQUIRE(k_total >= 1, "placement: no partition; give at least one");
  GRIDNN_REQUIRE(p.device.size() == p.first_block.size(), "placement: ", k_total, " partitions (first_block) but ",
                 p.device.size(), " devices");
  GRIDNN_REQUIRE(p.first_block[0] == 0, "placement: partitions[0].first_block must be 0, got ", p.first_block[0]);
  for (int k = 1; k < k_total; ++k)
    GRIDNN_REQUIRE(p.first_block[size_t(k)] > p.first_block[size_t(k) - 1], "placement: partitions[", k,
                   "].first_block = ", p.first_block[size_t(k)], " must be larger than partitions[", k - 1,
                   "].first_block = ", p.first_block[size_t(k) - 1],
                   " (partitions are contiguous, in order, and "
                   "never empty)");
  GRIDNN_REQUIRE(p.first_block.back() < blocks_total, "placement: partitions[", k_total - 1,
                 "].first_block = ", p.first_block.back(), " is out of range: the network has ", blocks_total,
                 " blocks (a partition cannot be empty)");
  std::set<int> used;
  for (int k = 0; k < k_total; ++k) {
    const int d = p.device[size_t(k)];
    GRIDNN_REQUIRE(d >= 0 && d < devices, "placement: partitions[", k, "].device = ", d, " is out of range [0, ",
                   devices, ")");
    GRIDNN_REQUIRE(used.insert(d).second, "placement: partitions[", k, "].device = ", d,
                   " is used by another partition; every partition needs its own device");
  }
  if (!p.blocks.empty() && !block_names.empty()) {
    GRIDNN_REQUIRE(p.blocks == block_names, "placement: its \"blocks\" (", p.blocks.size(),
                   " names) differ from the network's blocks (", block_names.size(),
                   " names); make the placement for this network (gridnn-place with its "
                   "profile)");
  }
}

// ---- simulation -----------------------------------------------------------------------

double penalty_reference_s(const Profile& profile, const Cluster& cluster) {
  double min_speed = std::numeric_limits<double>::infinity(), max_latency = 0;
  double min_bandwidth = std::numeric_limits<double>::infinity();
  for (const Device& d : cluster.devices) min_speed = std::min(min_speed, d.speed);
  for (int i = 0; i < cluster.size(); ++i)
    for (int j = 0; j < cluster.size(); ++j)
      if (i != j) {
        max_latency = std::max(max_latency, cluster.latency_s[size_t(i)][size_t(j)]);
        min_bandwidth = std::min(min_bandwidth, cluster.bandwidth[size_t(i)][size_t(j)]);
      }
  double compute = 0, transfer = 0;
  for (const BlockProfile& b : profile.blocks) {
    compute += b.forward_s + b.backward_s;
    transfer += max_latency + b.activation_bytes / min_bandwidth;  // 0 / inf = 0
  }
  const double m = profile.micro_batches * (profile.recompute ? 2 : 1);  // recomputation: at most twice
  return m * compute / min_speed + 2 * m * transfer + 1.0;               // + 1 s: nonzero on empty work
}

Simulation simulate(const Profile& profile, const Cluster& cluster, const Placement& p) {
  const int n = int(profile.blocks.size());
  const int k_total = p.partitions();
  const int m_total = profile.micro_batches;
  validate(p, n, cluster.size());

  // Per partition: compute per micro-batch; per cut: bytes and the link's two directions.
  std::vector<double> fwd(size_t(k_total), 0), bwd(size_t(k_total), 0);
  Simulation sim;
  sim.partition_busy_s.assign(size_t(k_total), 0);
  sim.partition_memory_bytes.assign(size_t(k_total), 0);
  for (int k = 0; k < k_total; ++k) {
    const Device& dev = cluster.devices[size_t(p.device[size_t(k)])];
    double resident = 0, stash = 0;
    for (int i = p.begin(k); i < p.end(k, n); ++i) {
      const BlockProfile& b = profile.blocks[size_t(i)];
      fwd[size_t(k)] += b.forward_s;
      bwd[size_t(k)] += b.backward_s;
      resident += b.memory_bytes;
      stash += b.stash_bytes;
    }
    fwd[size_t(k)] /= dev.speed;
    bwd[size_t(k)] /= dev.speed;
    sim.partition_busy_s[size_t(k)] =
        m_total * (fwd[size_t(k)] + bwd[size_t(k)]) + (profile.recompute ? (m_total - 1) * fwd[size_t(k)] : 0.0);
    sim.partition_memory_bytes[size_t(k)] = resident + m_total * stash;
  }
  struct Link {
    double occupy_s = 0, latency_s = 0, free_at = 0;
    double send(double ready) {  // returns the arrival time
      const double start = std::max(ready, free_at);
      free_at = start + occupy_s;
      return start + latency_s + occupy_s;
    }
  };
  std::vector<Link> down(size_t(std::max(k_total - 1, 0))), up(down.size());
  for (int k = 0; k + 1 < k_total; ++k) {
    const size_t a = size_t(p.device[size_t(k)]), b = size_t(p.device[size_t(k) + 1]);
    const double bytes = profile.blocks[size_t(p.end(k, n)) - 1].activation_bytes;
    down[size_t(k)] = {bytes / cluster.bandwidth[a][b], cluster.latency_s[a][b], 0};
    up[size_t(k)] = {bytes / cluster.bandwidth[b][a], cluster.latency_s[b][a], 0};
  }

  std::vector<double> busy_until(size_t(k_total), 0);
  std::vector<double> arrival(size_t(k_total), 0);  // of the current micro-batch, at partition k
  for (int m = 0; m < m_total; ++m)
    for (int k = 0; k < k_total; ++k) {
      const double start = std::max(busy_until[size_t(k)], k > 0 ? arrival[size_t(k)] : 0.0);
      busy_until[size_t(k)] = start + fwd[size_t(k)];
      if (k + 1 < k_total) arrival[size_t(k) + 1] = down[size_t(k)].send(busy_until[size_t(k)]);
    }
  for (int m = m_total - 1; m >= 0; --m)
    for (int k = k_total - 1; k >= 0; --k) {
      const double start = std::max(busy_until[size_t(k)], k + 1 < k_total ? arrival[size_t(k)] : 0.0);
      const bool recomputed = profile.recompute && m != m_total - 1;
      busy_until[size_t(k)] = start + bwd[size_t(k)] + (recomputed ? fwd[size_t(k)] : 0.0);
      if (k > 0) arrival[size_t(k) - 1] = up[size_t(k) - 1].send(busy_until[size_t(k)]);
    }
  sim.iteration_s = *std::max_element(busy_until.begin(), busy_until.end());

  double reference = -1;
  for (int k = 0; k < k_total; ++k) {
    const double limit = cluster.devices[size_t(p.device[size_t(k)])].memory_bytes;
    const double used = sim.partition_memory_bytes[size_t(k)];
    if (limit <= 0 || used <= limit) continue;
    if (reference < 0) reference = penalty_reference_s(profile, cluster);
    sim.fits = false;
    sim.penalty_s += reference * (1 + 10 * (used - limit) / limit);
  }
  return sim;
}

// ---- JSON -----------------------------------------------------------------------------

namespace {

std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  GRIDNN_REQUIRE(in, what, " file ", path, ": cannot open it");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Json parse(const std::string& path, const char* what) {
  const std::string text = read_text(path, what);
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    throw Error(detail::concat(what, " file ", path, ": not valid JSON (", e.what(), ")"));
  }
}

// A field of an object, by name, with the path shown in errors: "file: blocks[2].forward_s".
struct Reader {
  std::string path;

  const Json& at(const Json& j, const std::string& where, const char* key) const {
    GRIDNN_REQUIRE(j.is_object(), path, ": ", where.empty() ? "the top level" : where, " must be an object");
    const auto it = j.find(key);
    GRIDNN_REQUIRE(it != j.end(), path, ": ", name(where, key), " is missing");
    return *it;
  }
  static std::string name(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
  }
  double number(const Json& j, const std::string& where, const char* key) const {
    const Json& v = at(j, where, key);
    GRIDNN_REQUIRE(v.is_number(), path, ": ", name(where, key), " must be a number, got ", v.dump());
    return v.get<double>();
  }
  double number_or(const Json& j, const std::string& where, const char* key, double dflt) const {
    return j.contains(key) ? number(j, where, key) : dflt;
  }
  int integer(const Json& j, const std::string& where, const char* key) const {
    const Json& v = at(j, where, key);
    GRIDNN_REQUIRE(v.is_number_integer(), path, ": ", name(where, key), " must be an integer, got ", v.dump());
    const int64_t x = v.get<int64_t>();
    GRIDNN_REQUIRE(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(), path, ": ",
                   name(where, key), " is out of range: ", v.dump());
    return int(x);
  }
  std::string string(const Json& j, const std::string& where, const char* key) const {
    const Json& v = at(j, where, key);
    GRIDNN_REQUIRE(v.is_string(), path, ": ", name(where, key), " must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  const Json& array(const Json& j, const std::string& where, const char* key) const {
    const Json& v = at(j, where, key);
    GRIDNN_REQUIRE(v.is_array(), path, ": ", name(where, key), " must be an array, got ", v.dump());
    return v;
  }
  std::vector<std::string> names(const Json& j, const std::string& where, const char* key) const {
    std::vector<std::string> out;
    const Json& a = array(j, where, key);
    for (size_t i = 0; i < a.size(); ++i) {
      GRIDNN_REQUIRE(a[i].is_string(), path, ": ", name(where, key), "[", i, "] must be a string, got ", a[i].dump());
      out.push_back(a[i].get<std::string>());
    }
    return out;
  }
  // A D x D matrix, or one number for every pair.
  std::vector<std::vector<double>> matrix(const Json& j, const char* key, size_t n) const {
    const Json& v = at(j, "", key);
    if (v.is_number()) return std::vector<std::vector<double>>(n, std::vector<double>(n, v));
    GRIDNN_REQUIRE(v.is_array() && v.size() == n, path, ": ", key, " must be a number or a ", n, " x ", n,
                   " array (one row per device), got ", v.dump());
    std::vector<std::vector<double>> m(n, std::vector<double>(n, 0));
    for (size_t i = 0; i < n; ++i) {
      GRIDNN_REQUIRE(v[i].is_array() && v[i].size() == n, path, ": ", key, "[", i, "] must be an array of ", n,
                     " numbers, got ", v[i].dump());
      for (size_t c = 0; c < n; ++c) {
        GRIDNN_REQUIRE(v[i][c].is_number(), path, ": ", key, "[", i, "][", c, "] must be a number, got ",
                       v[i][c].dump());
        m[i][c] = v[i][c].get<double>();
      }
    }
    return m;
  }
};

// Re-throws a validation error with the file's name in front.
template <class F>
void validated(const std::string& path, F&& check) {
  try {
    check();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

// A matrix whose off-diagonal entries are all equal is written as one number.
Json matrix_json(const std::vector<std::vector<double>>& m) {
  double first = 0;
  bool found = false, uniform = true;
  for (size_t i = 0; i < m.size(); ++i)
    for (size_t j = 0; j < m[i].size(); ++j)
      if (i != j) {
        if (!found) first = m[i][j];
        uniform = uniform && m[i][j] == first;
        found = true;
      }
  if (uniform && found) return first;
  Json rows = Json::array();
  for (const auto& row : m) rows.push_back(row);
  return rows;
}

}  // namespace

Profile read_profile(const std::string& path) {
  const Json j = parse(path, "profile");
  const Reader r{path};
  Profile p;
  p.micro_batches = r.integer(j, "", "micro_batches");
  if (j.contains("recompute")) {
    GRIDNN_REQUIRE(j["recompute"].is_boolean(), path, ": recompute must be true or false");
    p.recompute = j["recompute"].get<bool>();
  }
  const Json& blocks = r.array(j, "", "blocks");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = "blocks[" + std::to_string(i) + "]";
    BlockProfile b;
    b.name = r.string(blocks[i], at, "name");
    b.forward_s = r.number(blocks[i], at, "forward_s");
    b.backward_s = r.number(blocks[i], at, "backward_s");
    b.activation_bytes = r.number(blocks[i], at, "activation_bytes");
    b.memory_bytes = r.number_or(blocks[i], at, "memory_bytes", 0);
    b.stash_bytes = r.number_or(blocks[i], at, "stash_bytes", 0);
    p.blocks.push_back(b);
  }
  validated(path, [&] { validate(p); });
  return p;
}

Cluster read_cluster(const std::string& path) {
  const Json j = parse(path, "cluster");
  const Reader r{path};
  Cluster c;
  const Json& devices = r.array(j, "", "devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string at = "devices[" + std::to_string(i) + "]";
    Device d;
    d.name = devices[i].contains("name") ? r.string(devices[i], at, "name") : "device" + std::to_string(i);
    d.speed = r.number(devices[i], at, "speed");
    d.memory_bytes = r.number_or(devices[i], at, "memory_bytes", 0);
    c.devices.push_back(d);
  }
  c.latency_s = r.matrix(j, "latency_s", devices.size());
  c.bandwidth = r.matrix(j, "bandwidth", devices.size());
  validated(path, [&] { validate(c); });
  return c;
}

Placement read_placement(const std::string& path) {
  const Json j = parse(path, "placement");
  const Reader r{path};
  Placement p;
  p.blocks = r.names(j, "", "blocks");
  const Json& parts = r.array(j, "", "partitions");
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::string at = "partitions[" + std::to_string(k) + "]";
    p.device.push_back(r.integer(parts[k], at, "device"));
    p.first_block.push_back(r.integer(parts[k], at, "first_block"));
  }
  validated(path, [&] { validate(p, int(p.blocks.size()), std::numeric_limits<int>::max()); });
  for (size_t k = 0; k < parts.size(); ++k) {
    if (!parts[k].contains("blocks")) continue;
    const std::string at = "partitions[" + std::to_string(k) + "]";
    const std::vector<std::string> names = r.names(parts[k], at, "blocks");
    const auto first = p.blocks.begin() + p.begin(int(k));
    const auto last = p.blocks.begin() + p.end(int(k), int(p.blocks.size()));
    const std::vector<std::string> expected(first, last);
    GRIDNN_REQUIRE(names == expected, path, ": ", at,
                   ".blocks does not match its first_block "
                   "and the next partition's (expected ",
                   expected.size(), " blocks from \"", expected.front(), "\")");
  }
  return p;
}

std::string profile_json(const Profile& profile) {
  Json j;
  j["micro_batches"] = profile.micro_batches;
  j["recompute"] = profile.recompute;
  j["blocks"] = Json::array();
  for (const BlockProfile& b : profile.blocks)
    j["blocks"].push_back({{"name", b.name},
                           {"forward_s", b.forward_s},
                           {"backward_s", b.backward_s},
                           {"activation_bytes", b.activation_bytes},
                           {"memory_bytes", b.memory_bytes},
                           {"stash_bytes", b.stash_bytes}});
  return j.dump(2) + "\n";
}

std::string cluster_json(const Cluster& cluster) {
  Json j;
  j["devices"] = Json::array();
  for (const Device& d : cluster.devices)
    j["devices"].push_back({{"name", d.name}, {"speed", d.speed}, {"memory_bytes", d.memory_bytes}});
  j["latency_s"] = matrix_json(cluster.latency_s);
  j["bandwidth"] = matrix_json(cluster.bandwidth);
  return j.dump(2) + "\n";
}

namespace {
Json placement_object(const Placement& p) {
  Json j;
  j["blocks"] = p.blocks;
  j["partitions"] = Json::array();
  for (int k = 0; k < p.partitions(); ++k) {
    Json part{{"device", p.device[size_t(k)]}, {"first_block", p.first_block[size_t(k)]}};
    const int n = int(p.blocks.size());
    const int begin = std::clamp(p.begin(k), 0, n), end = std::clamp(p.end(k, n), begin, n);
    if (n > 0)  // (clamped: an invalid placement is still written, for its error message)
      part["blocks"] = std::vector<std::string>(p.blocks.begin() + begin, p.blocks.begin() + end);
    j["partitions"].push_back(part);
  }
  return j;
}
}  // namespace

std::string placement_json(const Placement& p) { return placement_object(p).dump(2) + "\n"; }

std::string placement_json(const Placement& p, const Simulation& s) {
  Json j = placement_object(p);
  j["simulated_iteration_s"] = s.iteration_s;
  j["penalty_s"] = s.penalty_s;
  j["fits"] = s.fits;
  return j.dump(2) + "\n";
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GRIDNN_REQUIRE(out, "cannot write ", tmp, " (does its directory exist?)");
    out << text;
    out.flush();
    GRIDNN_REQUIRE(out, "writing ", tmp, " failed (disk full?)");
  }
  GRIDNN_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path);
}

}  // namespace gridnn::plan
