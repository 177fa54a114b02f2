// Safetensors files: the format PyTorch and the Hugging Face tools use for weights.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON, then the raw
// little-endian tensor bytes. The JSON maps each tensor name to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// (offsets relative to the start of the data section) and may hold "__metadata__", a
// map of strings to strings. gridnn reads and writes F32, F16, BF16, I32 and I64.
//
// The reader trusts nothing: the header length must lie within the file, the JSON must
// be well formed (no duplicate keys) and of the shape above, every dtype known, every
// shape × dtype size equal to its byte range, and the ranges must be in bounds,
// non-overlapping and cover the data section with no gaps (as the reference
// implementation requires). A bad file raises gridnn::Error naming the file and what is
// wrong with it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace gridnn {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;        // CPU tensors, by name
  std::map<std::string, std::string> metadata;  // the "__metadata__" entry, if any
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Reads and validates a whole file.
SafetensorsFile load_safetensors(const std::string& path);
// The bytes of each tensor of a file, from its header alone (the memory model's count of a
// weights file read, docs/design.md §6a); the file is validated when it is loaded.
std::vector<int64_t> safetensors_tensor_bytes(const std::string& path);
// Validates and decodes bytes already in memory; `source` names them in error messages.
SafetensorsFile parse_safetensors(const void* bytes, size_t size, const std::string& source);

// Encodes tensors (any device; device tensors are copied to the host) in the order
// given. Names must be unique, non-empty, valid UTF-8 and not "__metadata__". The header is padded with spaces so the
// data section starts at an 8-byte boundary, as the reference writer does.
std::string serialize_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});
// Writes atomically (core/file_io.h): a temporary file beside `path`, fsync, then
// rename, so a crash while saving never leaves a half-written file under `path`.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace gridnn
