// Listing and naming scans (scans.h).
#include "models/predict/scans.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "models/data/manifest.h"

namespace gridnn::predict {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() > end.size() && s.compare(s.size() - end.size(), std::string::npos, end) == 0;
}

// A NIfTI file's name: single files (.nii), pairs by their header (.hdr), either gzipped;
// `image_too` also takes a pair's image file (.img), which a folder listing leaves out.
bool is_nifti_name(const std::string& name, bool image_too) {
  for (const char* ext : {".nii", ".nii.gz", ".hdr", ".hdr.gz", ".img", ".img.gz"})
    if (ends_with(name, ext) && (image_too || std::strncmp(ext, ".img", 4) != 0)) return true;
  return false;
}

std::optional<data::Split> manifest_split(SplitFilter split) {
  switch (split) {
    case SplitFilter::all:
      return std::nullopt;
    case SplitFilter::train:
      return data::Split::train;
    case SplitFilter::val:
      return data::Split::val;
    case SplitFilter::test:
      return data::Split::test;
  }
  return std::nullopt;
}

}  // namespace

std::string scan_stem(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* ext : {".gz", ".nii", ".hdr", ".img"})
    if (ends_with(name, ext)) name.resize(name.size() - std::strlen(ext));
  return name;
}

std::vector<ScanEntry> list_scans(const std::string& data, SplitFilter split) {
  std::vector<ScanEntry> scans;
  std::error_code ec;
  if (fs::is_directory(data, ec)) {
    for (const auto& e : fs::directory_iterator(data))
      if (e.is_regular_file() && is_nifti_name(e.path().filename().string(), false))
        scans.push_back({e.path().string(), -1, 0});
    std::sort(scans.begin(), scans.end(), [](const ScanEntry& a, const ScanEntry& b) { return a.path < b.path; });
    GRIDNN_REQUIRE(!scans.empty(), "--data ", data, ": the folder has no NIfTI files (.nii, .nii.gz, .hdr)");
    return scans;
  }
  GRIDNN_REQUIRE(fs::exists(data, ec), "--data ", data, ": no such file or folder");
  if (is_nifti_name(data, true)) return {{data, -1, 0}};
  const data::Manifest manifest = data::read_manifest(data);
  const std::optional<data::Split> only = manifest_split(split);
  std::map<std::string, int> splits;
  for (const auto& row : manifest.rows) {
    ++splits[row.split == data::Split::unassigned ? "(none)" : enum_name(row.split)];
    if (!only || row.split == *only) scans.push_back({row.path, row.label, row.line});
  }
  std::string found;
  for (const auto& [name, count] : splits) found += (found.empty() ? "" : ", ") + name + " " + std::to_string(count);
  GRIDNN_REQUIRE(!scans.empty(), "--data ", data, ": no rows of split ", enum_name(split),
                 "; its rows by split: ", found, " (--split all takes every row)");
  return scans;
}

std::vector<std::string> explanation_names(const std::vector<ScanEntry>& scans) {
  std::map<std::string, int> uses;
  for (const auto& s : scans) ++uses[scan_stem(s.path)];
  std::vector<std::string> names;
  for (size_t i = 0; i < scans.size(); ++i) {
    const std::string stem = scan_stem(scans[i].path);
    names.push_back(uses[stem] > 1 ? stem + "-" + std::to_string(i + 1) : stem);
  }
  return names;
}

}  // namespace gridnn::predict
