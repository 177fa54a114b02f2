// The scans gridnn-predict reads (predict.h): the rows of a CSV manifest, one NIfTI file, or
// the NIfTI files of a folder; and the names their heatmaps are written under.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/names.h"

namespace gridnn::predict {

// Which rows of a manifest to predict (gridnn-predict --split); folders and single files
// have no splits and are read whole.
enum class SplitFilter { all, train, val, test };
inline constexpr EnumName<SplitFilter> kSplitFilterNames[] = {{SplitFilter::all, "all", "every row"},
                                                              {SplitFilter::train, "train"},
                                                              {SplitFilter::val, "val"},
                                                              {SplitFilter::test, "test"}};
constexpr EnumNames<SplitFilter> enum_names(SplitFilter) { return {"split", kSplitFilterNames}; }

struct ScanEntry {
  std::string path;
  int64_t label = -1;  // -1: unlabelled
  int line = 0;        // the manifest line (0: not from a manifest)
};

// The scans `data` names, in order: the rows of a manifest (of `split`), one NIfTI file, or
// the .nii/.nii.gz/.hdr files of a folder sorted by name (unlabelled). gridnn::Error for a
// missing path, an empty folder or a split without rows (the message counts the rows of
// each split).
std::vector<ScanEntry> list_scans(const std::string& data, SplitFilter split);

// "sub-01.nii.gz" -> "sub-01": the file name without folders and .nii/.nii.gz/.hdr/.img(.gz).
std::string scan_stem(const std::string& path);

// Every scan's name for its heatmap files: its stem, or "<stem>-<n>" (n its 1-based place)
// when scans share a stem.
std::vector<std::string> explanation_names(const std::vector<ScanEntry>& scans);

}  // namespace gridnn::predict
