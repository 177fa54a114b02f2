// The CSV manifest that lists a NIfTI dataset: one volume per row.
//
//   # comment lines and blank lines are skipped
//   path,label,split            <- optional header (detected by its first two fields)
//   sub-01/anat.nii.gz,0,train
//   /data/sub-02.nii,1,val
//   "scans/with, comma.nii",1   <- split left out or empty: unassigned
//
// Fields: path (relative paths are resolved against the CSV file's folder), label (an
// integer 0 <= label < 2^31), optional split (train, val or test; empty = unassigned).
// Fields may be quoted ("..." with "" for a quote) to hold commas; a quoted field cannot
// span lines. Spaces around fields are dropped, and so are CR line ends (files written on
// Windows). Errors name the file and line and say what is wrong (gridnn::Error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/names.h"

namespace gridnn::data {

// A row's split: "train", "val", "test"; "" for unassigned. parse_split(name) is the split
// named `name`, nullopt for any other word.
enum class Split { unassigned, train, val, test };
inline constexpr EnumName<Split> kSplitNames[] = {
    {Split::unassigned, ""}, {Split::train, "train"}, {Split::val, "val"}, {Split::test, "test"}};
constexpr EnumNames<Split> enum_names(Split) { return {"split", kSplitNames}; }
inline const char* split_name(Split split) { return enum_name(split); }
inline std::optional<Split> parse_split(const std::string& name) { return find_enum<Split>(name); }

struct ManifestRow {
  std::string path;  // resolved against the manifest's folder when relative
  int64_t label = 0;
  Split split = Split::unassigned;
  int line = 0;  // 1-based line in the manifest, for messages
};

struct Manifest {
  std::string source;  // the CSV file (or the name given to parse_manifest)
  std::vector<ManifestRow> rows;
};

// Reads and parses the CSV file at `csv_path`.
Manifest read_manifest(const std::string& csv_path);
// Parses CSV text; `source` names it in messages and relative paths are joined to
// `base_dir` (left as they are when base_dir is empty).
Manifest parse_manifest(const std::string& text, const std::string& source, const std::string& base_dir = "");

}  // namespace gridnn::data
