// gridnn-train --profile's per-layer table (see the header).
#include "models/run/layer_profile.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/tensor.h"

namespace gridnn::run {

namespace {

// One row of a rank's column: a layer's milliseconds per step, or a step-level line's (fwd
// alone).
struct Row {
  std::string name;
  double fwd = 0, bwd = 0, comm = 0;
  bool layer = true;
};

std::string rows_text(const std::vector<Row>& rows) {
  std::ostringstream out;
  out.precision(17);
  for (const Row& r : rows)
    out << r.name << '\t' << r.fwd << '\t' << r.bwd << '\t' << r.comm << '\t' << r.layer << '\n';
  return out.str();
}

std::vector<Row> rows_of(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Row r;
    std::getline(fields, r.name, '\t');
    fields >> r.fwd >> r.bwd >> r.comm >> r.layer;
    rows.push_back(r);
  }
  return rows;
}

// Every rank's `text`, in world rank order (collective over the world).
std::vector<std::string> gather_text(parallel::ProcessGrid& grid, const std::string& text) {
  const int n = grid.world().size();
  Tensor longest = Tensor::from_vector(std::vector<int64_t>{int64_t(text.size())}, Shape{1});
  parallel::CommLayerScope scope("profile");
  grid.world().all_reduce(longest, parallel::ReduceOp::max);
  const int64_t width = longest.data<int64_t>()[0] + 1;  // each slot ends in a 0
  std::vector<int64_t> slots(size_t(n * width), 0);
  for (size_t i = 0; i < text.size(); ++i)
    slots[size_t(grid.world_rank() * width) + i] = static_cast<unsigned char>(text[i]);
  Tensor all = Tensor::from_vector(slots, Shape{n * width});
  grid.world().all_reduce(all);
  std::vector<std::string> texts(static_cast<size_t>(n));
  const int64_t* chars = all.data<int64_t>();
  for (int r = 0; r < n; ++r)
    for (const int64_t* c = chars + r * width; *c != 0; ++c) texts[size_t(r)] += char(*c);
  return texts;
}

std::string cell(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", ms);
  return text;
}

}  // namespace

void add_comm_seconds(size_t first, std::map<std::string, double>& seconds_by_layer) {
  const std::vector<parallel::CommRecord>& records = parallel::comm_log().records();
  for (size_t i = first; i < records.size(); ++i) seconds_by_layer[records[i].layer] += records[i].seconds;
}

std::string layer_profile_table(parallel::ProcessGrid& grid, const Profiler& profiler,
                                const std::map<std::string, double>& comm_seconds, double step_seconds, int64_t steps) {
  const double ms = steps > 0 ? 1e3 / double(steps) : 0;
  std::vector<Row> mine;
  double in_layers = 0;
  for (const LayerSeconds& l : profiler.layers()) {
    const auto comm = comm_seconds.find(l.layer);
    mine.push_back({l.layer, ms * l.forward, ms * l.backward, comm == comm_seconds.end() ? 0 : ms * comm->second});
    in_layers += l.forward + l.backward;
  }
  double in_kinds = 0;
  for (const EnumName<ProfileKind>& k : kProfileKindNames) {
    if (!is_step_kind(k.value)) continue;
    in_kinds += profiler.seconds()[size_t(k.value)];
    mine.push_back({std::string("(") + k.name + ")", ms * profiler.seconds()[size_t(k.value)], 0, 0, false});
  }
  mine.push_back({"(outside layers)", ms * (step_seconds - in_layers - in_kinds), 0, 0, false});
  mine.push_back({"(step)", ms * step_seconds, 0, 0, false});

  // Rows in the order rank 0 met its layers, then the layers only later ranks have (another
  // pipeline stage's); the step-level lines last.
  std::vector<std::vector<Row>> ranks;
  for (const std::string& text : gather_text(grid, rows_text(mine))) ranks.push_back(rows_of(text));
  std::vector<std::string> layers, totals;
  for (const std::vector<Row>& rows : ranks)
    for (const Row& r : rows) {
      std::vector<std::string>& names = r.layer ? layers : totals;
      if (std::find(names.begin(), names.end(), r.name) == names.end()) names.push_back(r.name);
    }
  std::string table = "| layer |";
  std::string rule = "|---|";
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string rank = "r" + std::to_string(r);
    table += " " + rank + " fwd | " + rank + " bwd | " + rank + " comm |";
    rule += "--:|--:|--:|";
  }
  table += "\n" + rule + "\n";
  layers.insert(layers.end(), totals.begin(), totals.end());
  for (const std::string& name : layers) {
    table += "| " + name + " |";
    for (const std::vector<Row>& rows : ranks) {
      const auto row = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.name == name; });
      if (row == rows.end())
        table += " | | |";
      else if (!row->layer)
        table += " " + cell(row->fwd) + " | | |";
      else
        table += " " + cell(row->fwd) + " | " + cell(row->bwd) + " | " + cell(row->comm) + " |";
    }
    table += "\n";
  }
  return table;
}

}  // namespace gridnn::run
