// Safetensors reader and writer (format and checks: core/safetensors.h).
//
// Reading is split into steps that each check one thing and name what is wrong:
// split_file (length field and header bounds) -> parse_header_json (well-formed JSON
// object, no duplicate keys) -> parse_metadata / parse_entry (each entry's fields) ->
// check_layout (byte ranges tile the data section) -> decode (copy bytes into tensors).
// Every failure throws gridnn::Error "<source>: <what is wrong>[; <what to do>]".
#include "core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/file_io.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; gridnn copies it without byte swapping");

namespace gridnn {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthFieldBytes = 8;
// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

template <class... Parts>
[[noreturn]] void fail(const std::string& source, const Parts&... parts) {
  throw Error(detail::concat(source, ": ", parts...));
}

// ---- reading: raw layout -------------------------------------------------------------

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct FileParts {
  const char* header;
  uint64_t header_size;
  const unsigned char* data;
  uint64_t data_size;
};

FileParts split_file(const void* bytes, size_t size, const std::string& source) {
  if (size < kLengthFieldBytes)
    fail(source, "file is ", size,
         " bytes, too short to hold the 8-byte header length; "
         "the file is truncated or not a safetensors file");
  const auto* base = static_cast<const unsigned char*>(bytes);
  uint64_t header_size = read_u64_le(base);
  uint64_t after_length = uint64_t(size) - kLengthFieldBytes;
  if (header_size > kMaxHeaderBytes)
    fail(source, "header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes,
         " bytes; the file is damaged or not a safetensors file");
  if (header_size > after_length)
    fail(source, "header length ", header_size, " is larger than the ", after_length,
         " bytes that follow the length field; the file is truncated");
  const unsigned char* header = base + kLengthFieldBytes;
  return {reinterpret_cast<const char*>(header), header_size, header + header_size, after_length - header_size};
}

// ---- reading: JSON header ------------------------------------------------------------

// Short printable form of a JSON value for messages. It never recurses (nlohmann's dump()
// recurses once per nesting level): a scalar prints its value (ASCII-escaped, at most ~40
// chars), an array or object only its type and size.
std::string describe(const Json& v) {
  if (v.is_structured()) {
    const char* unit = v.is_array() ? " element" : " key";
    return detail::concat(v.type_name(), " of ", v.size(), unit, v.size() == 1 ? "" : "s");
  }
  std::string s = v.dump(-1, ' ', true);
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

// As describe(), with the type also named for scalars: "number 3", "array of 2 elements".
std::string describe_with_type(const Json& v) {
  if (v.is_structured() || v.is_null()) return describe(v);
  return detail::concat(v.type_name(), " ", describe(v));
}

// The deepest a valid header nests, as depth is counted in nlohmann's parser callback: 0 the
// header object, 1 its keys and values (entries, metadata), 2 their keys and values (dtype,
// shape, data_offsets, metadata strings), 3 the numbers inside shape and data_offsets.
constexpr int kMaxHeaderDepth = 3;

// Rejects nesting beyond any valid header as soon as the parser reaches it, so a small
// hostile file cannot make us build (and later walk) a DOM a million levels deep.
// `top_key` is the header key being read (a tensor name or __metadata__), "" if none yet.
void check_depth(int depth, const std::string& top_key, const std::string& source) {
  if (depth <= kMaxHeaderDepth) return;
  std::string where = top_key.empty() ? "" : " under '" + top_key + "'";
  fail(source, "header nests deeper than a safetensors header can (depth ", depth, " > ", kMaxHeaderDepth, where,
       "; tensor entries hold flat arrays of numbers and metadata holds strings); "
       "the file is damaged or not a safetensors file");
}

// Parses the header. nlohmann keeps the last of duplicate keys silently, so a parser
// callback records the first duplicate at any depth and we reject it afterwards. The same
// callback stops the parse at once when the header nests too deep (check_depth).
Json parse_header_json(const FileParts& parts, const std::string& source) {
  // nlohmann stops at a NUL byte as if the input ended there, so find NULs first: a
  // NUL is never valid in JSON text (inside strings it must be escaped).
  const void* nul = std::memchr(parts.header, '\0', parts.header_size);
  if (nul)
    fail(source, "header is not valid JSON (NUL byte at byte ", static_cast<const char*>(nul) - parts.header,
         " of the header); the file is damaged or not a safetensors file");

  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  std::string top_key;
  auto watch = [&](int depth, Json::parse_event_t event, Json& parsed) {
    check_depth(depth, top_key, source);
    if (event == Json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (depth == 1) top_key = key;
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };

  Json header;
  // check_depth throws gridnn::Error from inside the parse; it is no Json::exception, so it
  // passes these handlers unchanged.
  try {
    header = Json::parse(parts.header, parts.header + parts.header_size, watch);
  } catch (const Json::parse_error& e) {
    fail(source, "header is not valid JSON (parse error at byte ", e.byte,
         " of the header); the file is damaged or not a safetensors file");
  } catch (const Json::exception& e) {
    fail(source, "header could not be read as JSON (", e.what(), ")");
  }
  if (!duplicate.empty()) fail(source, "header has the key '", duplicate, "' more than once; each key must be unique");
  if (!header.is_object())
    fail(source, "header must be a JSON object mapping tensor names to entries; got ", header.type_name());
  // As in the reference reader; nlohmann alone would also skip a byte-order mark or spaces.
  if (parts.header[0] != '{') fail(source, "header must begin with '{' (no byte-order mark or whitespace before it)");
  return header;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& source) {
  if (!value.is_object())
    fail(source, "'", kMetadataKey, "' must be an object of string keys and string values; got ", value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      fail(source, "'", kMetadataKey, "' entry '", key, "' must be a string; got ", describe_with_type(item));
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

// One tensor's header entry, checked field by field.
struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// A JSON number holding an integer in [0, limit].
bool as_non_negative(const Json& v, uint64_t limit, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;  // the parser stores every integer >= 0 as unsigned
  uint64_t x = v.get<uint64_t>();
  if (x > limit) return false;
  *out = x;
  return true;
}

class EntryParser {
 public:
  EntryParser(const std::string& name, const std::string& source) : source_(source) { entry_.name = name; }

  TensorEntry parse(const Json& value) {
    if (!value.is_object()) fail_entry("must be an object with dtype, shape and data_offsets; got ", value.type_name());
    for (const auto& item : value.items()) {
      const std::string& key = item.key();
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail_entry("has unexpected key '", key, "'; an entry holds only dtype, shape and data_offsets");
    }
    parse_dtype(field(value, "dtype"));
    parse_shape(field(value, "shape"));
    parse_offsets(field(value, "data_offsets"));
    check_byte_count();
    return entry_;
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail_entry(const Parts&... parts) const {
    fail(source_, "tensor '", entry_.name, "' ", parts...);
  }

  const Json& field(const Json& value, const char* key) const {
    auto it = value.find(key);
    if (it == value.end()) fail_entry("has no '", key, "'; each entry needs dtype, shape and data_offsets");
    return *it;
  }

  void parse_dtype(const Json& v) {
    if (!v.is_string()) fail_entry("has a dtype that is not a string: ", describe(v));
    const auto& name = v.get_ref<const std::string&>();
    if (!dtype_from_safetensors_name(name, &entry_.dtype))
      fail_entry("has dtype '", name,
                 "', which gridnn does not support; convert it to F32, F16, "
                 "BF16, I32 or I64 before saving (in PyTorch: tensor.float())");
  }

  void parse_shape(const Json& v) {
    if (!v.is_array()) fail_entry("has a shape that is not an array: ", describe(v));
    if (v.size() > size_t(Shape::kMaxRank))
      fail_entry("has ", v.size(), " dimensions; gridnn tensors have at most ", Shape::kMaxRank);
    int64_t numel = 1;
    for (size_t i = 0; i < v.size(); ++i) {
      uint64_t d = 0;
      if (!as_non_negative(v[i], uint64_t(std::numeric_limits<int64_t>::max()), &d))
        fail_entry("has shape entry ", describe(v[i]), " at dimension ", i,
                   "; dimensions must be non-negative integers");
      entry_.dims.push_back(int64_t(d));
      // Same check, in the same order, as the Shape constructor, so Shape never throws.
      if (d != 0 && numel > std::numeric_limits<int64_t>::max() / int64_t(d))
        fail_entry("has shape ", dims_str(entry_.dims), i + 1 < v.size() ? " (and more)" : "",
                   " whose element count overflows 64 bits");
      numel *= int64_t(d);
    }
  }

  void parse_offsets(const Json& v) {
    if (!v.is_array() || v.size() != 2)
      fail_entry("has data_offsets ", describe(v), "; expected an array [begin, end]");
    const uint64_t any = std::numeric_limits<uint64_t>::max();
    if (!as_non_negative(v[0], any, &entry_.begin) || !as_non_negative(v[1], any, &entry_.end))
      fail_entry("has data_offsets [", describe(v[0]), ", ", describe(v[1]),
                 "]; begin and end must be non-negative integers");
    if (entry_.begin > entry_.end)
      fail_entry("has data_offsets [", entry_.begin, ", ", entry_.end, "] with begin after end");
  }

  void check_byte_count() const {
    uint64_t numel = 1;
    for (int64_t d : entry_.dims) numel *= uint64_t(d);  // fits: checked in parse_shape
    uint64_t expected = 0;
    bool overflow = __builtin_mul_overflow(numel, uint64_t(dtype_size(entry_.dtype)), &expected);
    uint64_t span = entry_.end - entry_.begin;
    if (overflow || expected != span)
      fail_entry("has shape ", dims_str(entry_.dims), " (",
                 overflow ? std::string("more than 2^64") : std::to_string(expected), " bytes as ",
                 dtype_safetensors_name(entry_.dtype), ") but data_offsets span ", span, " bytes");
  }

  const std::string& source_;
  TensorEntry entry_;
};

// The byte ranges must lie in the data section and tile it: sorted by begin, each range
// starts where the previous one ended, and the last one ends at the end of the section.
void check_layout(std::vector<TensorEntry>& entries, uint64_t data_size, const std::string& source) {
  for (const TensorEntry& e : entries)
    if (e.end > data_size)
      fail(source, "tensor '", e.name, "' has data_offsets [", e.begin, ", ", e.end, "] beyond the data section of ",
           data_size, " bytes; the file is truncated or damaged");
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : entries) {
    if (e.begin < covered)
      fail(source, "tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end, "] overlap those of tensor '",
           previous->name, "' [", previous->begin, ", ", previous->end, "]");
    if (e.begin > covered)
      fail(source, "bytes [", covered, ", ", e.begin, ") of the data section, before tensor '", e.name,
           "', belong to no tensor (a gap); the file is damaged");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    fail(source, data_size - covered, " trailing bytes after the last tensor's data (data section is ", data_size,
         " bytes, tensors cover ", covered, "); the file is damaged");
}

Tensor decode(const TensorEntry& e, const unsigned char* data) {
  Tensor t = Tensor::empty(Shape(e.dims), e.dtype);
  if (t.nbytes() > 0) std::memcpy(t.raw(), data + e.begin, t.nbytes());
  return t;
}

// ---- writing -------------------------------------------------------------------------

void append_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

void check_names(const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    GRIDNN_REQUIRE(!name.empty(), "save_safetensors: a tensor has an empty name; give every tensor a name");
    GRIDNN_REQUIRE(name != kMetadataKey, "save_safetensors: '", kMetadataKey,
                   "' is reserved for metadata and cannot name a tensor");
    GRIDNN_REQUIRE(seen.insert(name).second, "save_safetensors: tensor name '", name,
                   "' appears more than once; names must be unique");
    GRIDNN_REQUIRE(tensor.defined(), "save_safetensors: tensor '", name, "' is undefined");
  }
}

// JSON header text, padded with spaces so the data section starts 8-byte aligned.
std::string header_text(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    uint64_t bytes = tensor.nbytes();
    header[name] = {{"dtype", dtype_safetensors_name(tensor.dtype())},
                    {"shape", tensor.shape().dims()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(
        "save_safetensors: a tensor name or metadata string is not valid UTF-8; "
        "safetensors headers are UTF-8 JSON");
  }
  size_t unaligned = (kLengthFieldBytes + text.size()) % 8;
  if (unaligned) text.append(8 - unaligned, ' ');
  return text;
}

void append_data(std::string& out, const Tensor& tensor) {
  if (tensor.nbytes() == 0) return;
  Tensor host = tensor.to_host();
  out.append(static_cast<const char*>(host.raw()), host.nbytes());
}

}  // namespace

SafetensorsFile parse_safetensors(const void* bytes, size_t size, const std::string& source) {
  FileParts parts = split_file(bytes, size, source);
  Json header = parse_header_json(parts, source);

  SafetensorsFile file;
  std::vector<TensorEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      file.metadata = parse_metadata(value, source);
    else
      entries.push_back(EntryParser(key, source).parse(value));
  }
  check_layout(entries, parts.data_size, source);
  for (const TensorEntry& e : entries) file.tensors.emplace(e.name, decode(e, parts.data));
  return file;
}

std::vector<int64_t> safetensors_tensor_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char size_bytes[8] = {};
  GRIDNN_REQUIRE(in.read(reinterpret_cast<char*>(size_bytes), 8), path, ": not a safetensors file (no header size)");
  const uint64_t size = read_u64_le(size_bytes);
  GRIDNN_REQUIRE(size <= uint64_t(std::filesystem::file_size(path)) - 8, path, ": the header size ", size,
                 " is past the end of the file");
  std::string header(size, '\0');
  GRIDNN_REQUIRE(in.read(header.data(), std::streamsize(size)), path, ": the header could not be read");
  const Json j = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  GRIDNN_REQUIRE(j.is_object(), path, ": the header is not a JSON object");
  std::vector<int64_t> bytes;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") continue;
    const Json offsets = entry.is_object() ? entry.value("data_offsets", Json()) : Json();
    GRIDNN_REQUIRE(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                       offsets[1].is_number_unsigned() && offsets[1].get<uint64_t>() >= offsets[0].get<uint64_t>(),
                   path, ": tensor ", name, " has no valid data_offsets");
    bytes.push_back(int64_t(offsets[1].get<uint64_t>() - offsets[0].get<uint64_t>()));
  }
  return bytes;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::string bytes = read_whole_file(path);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

std::string serialize_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  check_names(tensors);
  std::string header = header_text(tensors, metadata);
  std::string out;
  append_u64_le(out, header.size());
  out += header;
  for (const auto& named : tensors) append_data(out, named.second);
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

}  // namespace gridnn
