#include "models/data/manifest.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace gridnn::data {
namespace {

std::string trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && (s[begin] == ' ' || s[begin] == '\t')) ++begin;
  while (end > begin && (s[end - 1] == ' ' || s[end - 1] == '\t')) --end;
  return s.substr(begin, end - begin);
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits one CSV line into fields; `where` ("manifest.csv:3") prefixes errors.
std::vector<std::string> split_fields(const std::string& line, const std::string& where) {
  std::vector<std::string> fields;
  size_t pos = 0;
  while (true) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    std::string field;
    if (pos < line.size() && line[pos] == '"') {
      ++pos;
      bool closed = false;
      while (pos < line.size()) {
        if (line[pos] == '"') {
          if (pos + 1 < line.size() && line[pos + 1] == '"') {
            field += '"';
            pos += 2;
            continue;
          }
          ++pos;
          closed = true;
          break;
        }
        field += line[pos++];
      }
      GRIDNN_REQUIRE(closed, where,
                     ": a quoted field has no closing quote (quoted fields "
                     "cannot span lines; write \"\" for a quote inside one)");
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
      GRIDNN_REQUIRE(pos == line.size() || line[pos] == ',', where,
                     ": text after a closing quote; put the whole field in quotes");
    } else {
      const size_t comma = line.find(',', pos);
      const size_t end = comma == std::string::npos ? line.size() : comma;
      field = trim(line.substr(pos, end - pos));
      GRIDNN_REQUIRE(field.find('"') == std::string::npos, where, ": stray quote in \"", field,
                     "\"; quote the whole field and double quotes inside it");
      pos = end;
    }
    fields.push_back(field);
    if (pos >= line.size()) break;
    ++pos;  // the comma
    if (pos == line.size()) {
      fields.emplace_back();  // "a,b," ends with an empty field
      break;
    }
  }
  return fields;
}

bool is_header(const std::vector<std::string>& fields) {
  return fields.size() >= 2 && lower(fields[0]) == "path" && lower(fields[1]) == "label" &&
         (fields.size() == 2 || lower(fields[2]) == "split");
}

int64_t parse_label(const std::string& text, const std::string& where) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  GRIDNN_REQUIRE(!text.empty(), where, ": the label is empty; give an integer class 0, 1, ...");
  int64_t value = 0;
  for (char c : text) {
    GRIDNN_REQUIRE(c >= '0' && c <= '9', where, ": label \"", text,
                   "\" is not a non-negative integer class (0, 1, ...)");
    value = value * 10 + (c - '0');
    GRIDNN_REQUIRE(value < kLimit, where, ": label ", text, " is too large (at most ", kLimit - 1, ")");
  }
  return value;
}

}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& source, const std::string& base_dir) {
  Manifest manifest;
  manifest.source = source;
  std::istringstream in(text);
  std::string line;
  bool seen_row = false;  // a header may only be the first row
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = source + ":" + std::to_string(number);
    const std::string content = trim(line);
    if (content.empty() || content[0] == '#') continue;
    std::vector<std::string> fields = split_fields(line, where);
    if (!seen_row && is_header(fields)) {
      seen_row = true;
      continue;
    }
    seen_row = true;
    GRIDNN_REQUIRE(fields.size() >= 2, where,
                   ": missing column: expected path,label[,split] "
                   "but found ",
                   fields.size(), " field");
    GRIDNN_REQUIRE(fields.size() <= 3, where, ": ", fields.size(),
                   " fields; expected path,label[,split] (quote paths that contain commas)");
    ManifestRow row;
    row.line = number;
    GRIDNN_REQUIRE(!fields[0].empty(), where, ": the path is empty");
    row.path = fields[0];
    if (!base_dir.empty() && std::filesystem::path(row.path).is_relative())
      row.path = (std::filesystem::path(base_dir) / row.path).lexically_normal().string();
    row.label = parse_label(fields[1], where);
    if (fields.size() == 3) {
      std::optional<Split> split = find_enum<Split>(fields[2]);
      GRIDNN_REQUIRE(split.has_value(), where, ": unknown split \"", fields[2],
                     "\"; use train, val, test or leave it empty");
      row.split = *split;
    }
    manifest.rows.push_back(std::move(row));
  }
  GRIDNN_REQUIRE(!manifest.rows.empty(), source, ": no rows; list one volume per line as path,label[,split]");
  return manifest;
}

Manifest read_manifest(const std::string& csv_path) {
  std::ifstream file(csv_path, std::ios::binary);
  GRIDNN_REQUIRE(file.is_open(), csv_path, ": cannot open the manifest; check the path");
  std::ostringstream text;
  text << file.rdbuf();
  GRIDNN_REQUIRE(!file.bad(), csv_path, ": read error");
  std::string base_dir = std::filesystem::path(csv_path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  return parse_manifest(text.str(), csv_path, base_dir);
}

}  // namespace gridnn::data
