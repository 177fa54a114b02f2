// Safetensors reader and writer (format and checks: core/safetensors.h).
//
// Reading is split into steps that each check one thing and name what is wrong:
// split_file (length field and header bounds) -> parse_header_json (well-formed JSON
// object, no duplicate keys) -> parse_metadata / parse_entry (each entry's fields) ->
// check_layout (byte ranges tile the data section) -> decode (copy bytes into tensors).
// Every failure throws gridnn::Error "<source>: <what is wrong>[; <what to do>]".
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

std::string errno_text(int err) { return std::strerror(err); }

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
  return {reinterpret_cast<const char*>(header), header_size, header + header_size,
          after_length - header_size};
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
  fail(source, "header nests deeper than a safetensors header can (depth ", depth, " > ",
       kMaxHeaderDepth, where,
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
    fail(source, "header is not valid JSON (NUL byte at byte ",
         static_cast<const char*>(nul) - parts.header,
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
  if (!duplicate.empty())
    fail(source, "header has the key '", duplicate, "' more than once; each key must be unique");
  if (!header.is_object())
    fail(source, "header must be a JSON object mapping tensor names to entries; got ",
         header.type_name());
  // As in the reference reader; nlohmann alone would also skip a byte-order mark or spaces.
  if (parts.header[0] != '{')
    fail(source, "header must begin with '{' (no byte-order mark or whitespace before it)");
  return header;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& source) {
  if (!value.is_object())
    fail(source, "'", kMetadataKey, "' must be an object of string keys and string values; got ",
         value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      fail(source, "'", kMetadataKey, "' entry '", key, "' must be a string; got ",
           describe_with_type(item));
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
  EntryParser(const std::string& name, const std::string& source) : source_(source) {
    entry_.name = name;
  }

  TensorEntry parse(const Json& value) {
    if (!value.is_object())
      fail_entry("must be an object with dtype, shape and data_offsets; got ", value.type_name());
    for (const auto& item : value.items()) {
      const std::string& key = item.key();
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail_entry("has unexpected key '", key,
                   "'; an entry holds only dtype, shape and data_offsets");
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
    if (it == value.end())
      fail_entry("has no '", key, "'; each entry needs dtype, shape and data_offsets");
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
void check_layout(std::vector<TensorEntry>& entries, uint64_t data_size,
                  const std::string& source) {
  for (const TensorEntry& e : entries)
    if (e.end > data_size)
      fail(source, "tensor '", e.name, "' has data_offsets [", e.begin, ", ", e.end,
           "] beyond the data section of ", data_size, " bytes; the file is truncated or damaged");
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : entries) {
    if (e.begin < covered)
      fail(source, "tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end,
           "] overlap those of tensor '", previous->name, "' [", previous->begin, ", ",
           previous->end, "]");
    if (e.begin > covered)
      fail(source, "bytes [", covered, ", ", e.begin, ") of the data section, before tensor '",
           e.name, "', belong to no tensor (a gap); the file is damaged");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    fail(source, data_size - covered,
         " trailing bytes after the last tensor's data (data section is ", data_size,
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
    GRIDNN_REQUIRE(!name.empty(),
                   "save_safetensors: a tensor has an empty name; give every tensor a name");
    GRIDNN_REQUIRE(name != kMetadataKey, "save_safetensors: '", kMetadataKey,
                   "' is reserved for metadata and cannot name a tensor");
    GRIDNN_REQUIRE(seen.insert(name).second, "save_safetensors: tensor name '", name,
                   "' appears more than once; names must be unique");
    GRIDNN_REQUIRE(tensor.defined(), "save_safetensors: tensor '", name, "' is undefined");
  }
}

// JSON header text, padded with spaces so the data section starts 8-byte aligned.
std::string header_text(const NamedTensors& tensors,
                        const std::map<std::string, std::string>& metadata) {
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

// ---- files ---------------------------------------------------------------------------

// Closes a POSIX file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and returns close()'s result (0, or -1 with errno set).
  int close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Removes the temporary file on scope exit unless it was renamed into place.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

std::string read_whole_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open for reading: ", errno_text(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(path, "cannot stat: ", errno_text(errno));
  if (!S_ISREG(info.st_mode)) fail(path, "is not a regular file");
  std::string bytes(size_t(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed: ", errno_text(errno));
    if (n == 0) fail(path, "file shrank while being read (", done, " of ", bytes.size(), " bytes)");
    done += size_t(n);
  }
  return bytes;
}

// Armed by inject_save_crash_for_testing: write this many bytes, then _Exit.
std::atomic<int64_t> g_crash_after_bytes{-1};
std::atomic<int> g_crash_exit_code{86};

// For tests of a full disk without one: GRIDNN_TEST_DISK_FULL_AFTER=N makes every file
// write fail with ENOSPC once N bytes of it are written, as a full device does.
int64_t disk_full_after() {
  static const int64_t bytes = [] {
    const char* v = std::getenv("GRIDNN_TEST_DISK_FULL_AFTER");
    return v && *v ? std::strtoll(v, nullptr, 10) : int64_t(-1);
  }();
  return bytes;
}

void write_all(int fd, const std::string& bytes, const std::string& what) {
  size_t done = 0;
  const int64_t crash_after = g_crash_after_bytes.exchange(-1);
  const int64_t full_after = disk_full_after();
  while (done < bytes.size()) {
    if (full_after >= 0 && done >= size_t(full_after)) fail(what, "write failed: ", errno_text(ENOSPC));
    if (crash_after >= 0 && done >= size_t(crash_after)) std::_Exit(g_crash_exit_code.load());
    size_t chunk = bytes.size() - done;
    if (crash_after >= 0) chunk = std::min(chunk, size_t(crash_after) - done);
    if (full_after >= 0) chunk = std::min(chunk, size_t(full_after) - done);
    ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(what, "write failed: ", errno_text(errno));
    done += size_t(n);
  }
}

// Creates the temporary file beside `path` (so the rename stays in one filesystem) under a
// name unique to this call: mkstemp picks random letters and creates with O_EXCL, so ranks
// on different hosts saving to one shared filesystem never share a temporary (a name made
// from the process id could collide). `templ` ends in "XXXXXX" and receives the name.
int create_temp_file(std::string* templ, const std::string& path) {
  int fd = ::mkostemp(templ->data(), O_CLOEXEC);
  if (fd < 0) fail(path, "cannot create temporary file '", *templ, "': ", errno_text(errno));
  return fd;
}

// The process umask, read without changing it: umask() can only be read by setting it,
// which would race with other threads creating files. Linux reports it in
// /proc/self/status; where that is unavailable, assume the usual 022.
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0) return mode_t(std::strtoul(line.c_str() + 6, nullptr, 8));
  return 022;
}

// mkstemp creates the file readable by its owner only; give the saved file the mode any
// newly created file gets (0666 less the umask), as open(O_CREAT, 0666) would.
void set_new_file_mode(int fd, const std::string& path, const std::string& temp) {
  if (::fchmod(fd, 0666 & ~current_umask()) != 0)
    fail(path, "cannot set the mode of '", temp, "': ", errno_text(errno));
}

// Makes the rename durable. Filesystems that cannot sync a directory (EINVAL) are tolerated.
void sync_directory(const std::string& dir, const std::string& path) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    fail(path, "saved, but cannot open directory '", dir, "' to sync it: ", errno_text(errno));
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    fail(path, "saved, but syncing directory '", dir, "' failed: ", errno_text(errno));
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

SafetensorsFile load_safetensors(const std::string& path) {
  std::string bytes = read_whole_file(path);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  check_names(tensors);
  std::string header = header_text(tensors, metadata);
  std::string out;
  append_u64_le(out, header.size());
  out += header;
  for (const auto& named : tensors) append_data(out, named.second);
  return out;
}

void inject_save_crash_for_testing(size_t bytes, int exit_code) {
  g_crash_exit_code = exit_code;
  g_crash_after_bytes = int64_t(bytes);
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::string bytes = serialize_safetensors(tensors, metadata);
  std::string temp = path + ".tmp.XXXXXX";  // mkstemp replaces the Xs

  FileDescriptor fd(create_temp_file(&temp, path));
  TempFileGuard guard(temp);
  set_new_file_mode(fd.get(), path, temp);
  write_all(fd.get(), bytes, path);
  if (::fsync(fd.get()) != 0) fail(path, "fsync of '", temp, "' failed: ", errno_text(errno));
  if (fd.close() != 0) fail(path, "closing '", temp, "' failed: ", errno_text(errno));
  if (::rename(temp.c_str(), path.c_str()) != 0)
    fail(path, "cannot rename '", temp, "' over it: ", errno_text(errno));
  guard.release();

  std::string dir = std::filesystem::path(path).parent_path().string();
  sync_directory(dir.empty() ? "." : dir, path);
}

}  // namespace gridnn
