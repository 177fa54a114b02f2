// Tests of the safetensors reader and writer (core/safetensors.h): round trips of every
// dtype, the exact bytes written, the file PyTorch wrote (test/parity/fixtures), atomic
// saving, and one test per way a file can be malformed: each must raise gridnn::Error
// whose message names the source and the fact that is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>

#include "core/safetensors.h"
#include "test/parity/safetensors_sample.h"
#include "test/support/random_tensor.h"
#include "test/support/temp_dir.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;
using test::random_tensor;
using test::tensors_equal;

constexpr const char* kSource = "bad.safetensors";

// ---- helpers -------------------------------------------------------------------------

std::string le64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out;
}

// A file whose length field says `header.size()`.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

// `n` bytes of tensor data (the values do not matter to the checks).
std::string data_bytes(size_t n) { return std::string(n, '\x11'); }

uint64_t header_length(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(file[size_t(i)]);
  return n;
}

SafetensorsFile parse(const std::string& bytes) { return parse_safetensors(bytes.data(), bytes.size(), kSource); }

// Passes when parsing throws gridnn::Error "bad.safetensors: ..." mentioning every fact.
::testing::AssertionResult rejected(const std::string& bytes, std::initializer_list<std::string> facts = {}) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    std::string message = e.what();
    if (message.rfind(std::string(kSource) + ": ", 0) != 0)
      return ::testing::AssertionFailure() << "message does not start with the source: " << message;
    for (const std::string& fact : facts)
      if (message.find(fact) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << fact << "\": " << message;
    return ::testing::AssertionSuccess() << message;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than gridnn::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "the file was accepted";
}

// Runs `f`, expecting gridnn::Error with every fact in its message.
template <class F>
::testing::AssertionResult throws_error(F f, std::initializer_list<std::string> facts) {
  try {
    f();
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& fact : facts)
      if (message.find(fact) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << fact << "\": " << message;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no gridnn::Error was thrown";
}

void expect_same_tensors(const SafetensorsFile& file, const NamedTensors& expected) {
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    auto it = file.tensors.find(name);
    ASSERT_NE(it, file.tensors.end()) << "missing tensor " << name;
    EXPECT_TRUE(tensors_equal(it->second, tensor)) << name;
  }
}

// A valid one-tensor entry: `name` is F32[2] at data_offsets [begin, begin + 8].
std::string f32_pair(const std::string& name, int begin) {
  return "\"" + name + R"(":{"dtype":"F32","shape":[2],"data_offsets":[)" + std::to_string(begin) + "," +
         std::to_string(begin + 8) + "]}";
}

// ---- round trips ---------------------------------------------------------------------

TEST(SafetensorsRoundTrip, EveryDtypeAndShape) {
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
  const Shape shapes[] = {Shape{}, Shape{0}, Shape{2, 0, 3}, Shape{3}, Shape{2, 3, 4}, Shape{1, 2, 1, 2, 3}};
  NamedTensors tensors;
  uint64_t seed = 1;
  for (DType dtype : dtypes) {
    float range = dtype == DType::i32 ? 1e6f : dtype == DType::i64 ? 1e9f : 4.0f;
    for (const Shape& shape : shapes)
      tensors.emplace_back(std::string(dtype_name(dtype)) + shape.str(),
                           random_tensor(shape, seed++, -range, range, dtype));
  }
  expect_same_tensors(parse(serialize_safetensors(tensors)), tensors);
}

TEST(SafetensorsRoundTrip, SpecialFloatValuesKeepTheirBits) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f,
                               -0.0f,
                               inf,
                               -inf,
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max()};
  NamedTensors tensors = {{"special", Tensor::from_vector(values, Shape{7})}};
  expect_same_tensors(parse(serialize_safetensors(tensors)), tensors);
}

TEST(SafetensorsRoundTrip, ViewSavesOnlyItsElements) {
  Tensor whole = random_tensor(Shape{4, 3}, 9);
  Tensor rows = whole.narrow(1, 2);
  SafetensorsFile file = parse(serialize_safetensors({{"rows", rows}}));
  EXPECT_TRUE(tensors_equal(file.tensors.at("rows"), rows.clone()));
}

TEST(SafetensorsRoundTrip, Metadata) {
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"empty", ""}, {"unicode ✓", "Grüße \"quoted\"\n"}};
  NamedTensors tensors = {{"w", random_tensor(Shape{2, 2}, 3)}};
  SafetensorsFile file = parse(serialize_safetensors(tensors, metadata));
  EXPECT_EQ(file.metadata, metadata);
  expect_same_tensors(file, tensors);
}

TEST(SafetensorsRoundTrip, NoTensorsAndNoMetadata) {
  SafetensorsFile file = parse(serialize_safetensors({}));
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

TEST(SafetensorsRoundTrip, DeviceTensorIsCopiedToTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Tensor host = random_tensor(Shape{3, 5}, 4);
  SafetensorsFile file = parse(serialize_safetensors({{"x", host.to(Device::cuda(0))}}));
  EXPECT_TRUE(tensors_equal(file.tensors.at("x"), host));
}

// ---- the bytes written ---------------------------------------------------------------

TEST(SafetensorsWriter, ExactBytesOfATinyFile) {
  Tensor x = Tensor::from_vector<float>({1.0f, -2.0f}, Shape{2});
  // 79 bytes of JSON plus one space of padding: 8 + 80 is a multiple of 8.
  const std::string header = R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  const std::string expected =
      std::string("\x50\0\0\0\0\0\0\0", 8) + header + std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(serialize_safetensors({{"x", x}}, {{"k", "v"}}), expected);
}

TEST(SafetensorsWriter, KeepsTheGivenOrderOfTensors) {
  NamedTensors tensors = {{"z", Tensor::from_vector<int32_t>({1}, Shape{1})},
                          {"a", Tensor::from_vector<int32_t>({2}, Shape{1})}};
  std::string bytes = serialize_safetensors(tensors);
  std::string header = bytes.substr(8, header_length(bytes));
  EXPECT_LT(header.find("\"z\""), header.find("\"a\""));
  EXPECT_NE(header.find(R"("z":{"dtype":"I32","shape":[1],"data_offsets":[0,4]})"), std::string::npos);
  EXPECT_EQ(bytes.substr(bytes.size() - 8), std::string("\x01\0\0\0\x02\0\0\0", 8));
}

TEST(SafetensorsWriter, HeaderIsPaddedWithSpacesTo8Bytes) {
  for (size_t name_length = 1; name_length <= 17; ++name_length) {
    std::string name(name_length, 'n');
    std::string bytes = serialize_safetensors({{name, random_tensor(Shape{3}, 5)}});
    uint64_t n = header_length(bytes);
    EXPECT_EQ((8 + n) % 8, 0u) << name;
    std::string header = bytes.substr(8, n);
    size_t json_end = header.rfind('}') + 1;
    EXPECT_EQ(header.substr(json_end), std::string(n - json_end, ' ')) << name;
    EXPECT_LT(n - json_end, 8u) << name;
    EXPECT_EQ(bytes.size(), 8 + n + 12) << name;
  }
}

TEST(SafetensorsWriter, RefusesBadNames) {
  Tensor t = random_tensor(Shape{2}, 1);
  EXPECT_TRUE(throws_error([&] { serialize_safetensors({{"", t}}); }, {"empty name"}));
  EXPECT_TRUE(throws_error([&] { serialize_safetensors({{"a", t}, {"a", t}}); }, {"'a'", "more than once"}));
  EXPECT_TRUE(throws_error([&] { serialize_safetensors({{"__metadata__", t}}); }, {"reserved"}));
  EXPECT_TRUE(throws_error([&] { serialize_safetensors({{"u", Tensor()}}); }, {"'u'", "undefined"}));
  EXPECT_TRUE(throws_error([&] { serialize_safetensors({{"bad\xff", t}}); }, {"UTF-8"}));
}

// ---- reading files from other writers ------------------------------------------------

TEST(SafetensorsReader, ReadsTheFileTorchWrote) {
  SafetensorsFile file = load_safetensors(GRIDNN_TEST_DATA_DIR "/torch_written.safetensors");
  EXPECT_EQ(file.metadata, parity::sample_metadata());
  ASSERT_EQ(file.tensors.size(), parity::sample_tensors().size());
  for (const parity::SampleTensor& spec : parity::sample_tensors()) {
    auto it = file.tensors.find(spec.name);
    ASSERT_NE(it, file.tensors.end()) << spec.name;
    EXPECT_TRUE(tensors_equal(it->second, parity::make_sample_tensor(spec))) << spec.name;
  }
}

TEST(SafetensorsReader, AcceptsAnyKeyOrderAndWhitespace) {
  std::string header =
      "{\n  \"b\": {\"data_offsets\": [4, 12], \"shape\": [2], \"dtype\": \"F32\"},\n"
      "  \"a\": {\"shape\": [], \"dtype\": \"I32\", \"data_offsets\": [0, 4]}\n}\n\t ";
  SafetensorsFile file = parse(file_bytes(header, data_bytes(12)));
  EXPECT_EQ(file.tensors.at("a").shape(), Shape{});
  EXPECT_EQ(file.tensors.at("b").shape(), Shape{2});
  EXPECT_EQ(file.tensors.at("a").to_vector<int32_t>()[0], 0x11111111);
}

TEST(SafetensorsReader, ZeroElementTensorsMayShareAnOffset) {
  std::string header = R"({"e1":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)" + f32_pair("x", 0) + "," +
                       R"("e2":{"dtype":"I64","shape":[3,0],"data_offsets":[8,8]}})";
  SafetensorsFile file = parse(file_bytes(header, data_bytes(8)));
  EXPECT_EQ(file.tensors.at("e2").shape(), (Shape{3, 0}));
}

// ---- rejected files: raw layout ------------------------------------------------------

TEST(SafetensorsRejects, EveryTruncationOfAValidFile) {
  std::string valid = serialize_safetensors(parity::make_sample(), parity::sample_metadata());
  ASSERT_NO_THROW(parse(valid));
  for (size_t length = 0; length < valid.size(); ++length)
    EXPECT_TRUE(rejected(valid.substr(0, length))) << "prefix of " << length << " bytes";
}

TEST(SafetensorsRejects, TruncationsNameTheProblem) {
  std::string valid = file_bytes("{" + f32_pair("t", 0) + "}", data_bytes(8));
  EXPECT_TRUE(rejected(valid.substr(0, 5), {"5 bytes", "too short"}));
  EXPECT_TRUE(rejected(valid.substr(0, 20), {"header length", "truncated"}));
  EXPECT_TRUE(rejected(valid.substr(0, valid.size() - 3), {"'t'", "beyond the data section"}));
}

TEST(SafetensorsRejects, HeaderLengthLargerThanTheFile) {
  EXPECT_TRUE(rejected(le64(1000) + "{}", {"header length 1000", "2 bytes"}));
}

TEST(SafetensorsRejects, HugeHeaderLength) {
  EXPECT_TRUE(rejected(le64(uint64_t(1) << 63) + "{}", {"9223372036854775808", "limit"}));
  EXPECT_TRUE(rejected(le64(~uint64_t(0)) + "{}", {"18446744073709551615", "limit"}));
  EXPECT_TRUE(rejected(le64(100'000'001) + "{}", {"100000001", "limit"}));
}

TEST(SafetensorsRejects, HeaderThatIsNotJson) {
  EXPECT_TRUE(rejected(file_bytes(""), {"not valid JSON"}));
  EXPECT_TRUE(rejected(file_bytes("{\"a\": "), {"not valid JSON"}));
  EXPECT_TRUE(rejected(file_bytes("not json at all"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(file_bytes("{} trailing"), {"not valid JSON"}));
  EXPECT_TRUE(rejected(file_bytes("{\"\xff\": 1}"), {"not valid JSON"}));  // not UTF-8
  EXPECT_TRUE(rejected(file_bytes(std::string("{}\0\0", 4)), {"not valid JSON", "NUL byte at byte 2"}));
  EXPECT_TRUE(rejected(file_bytes(std::string("{\"a\0\": 1}", 9)), {"NUL byte at byte 3"}));
}

TEST(SafetensorsRejects, HeaderThatIsNotAnObject) {
  EXPECT_TRUE(rejected(file_bytes("[1, 2]"), {"JSON object", "got array"}));
  EXPECT_TRUE(rejected(file_bytes("\"text\""), {"JSON object", "got string"}));
  EXPECT_TRUE(rejected(file_bytes("7"), {"JSON object", "got number"}));
  EXPECT_TRUE(rejected(file_bytes("\xef\xbb\xbf{}"), {"must begin with '{'"}));  // UTF-8 BOM
  EXPECT_TRUE(rejected(file_bytes(" {}"), {"must begin with '{'"}));
}

TEST(SafetensorsRejects, DuplicateKeys) {
  std::string header = "{" + f32_pair("t", 0) + "," + f32_pair("t", 0) + "}";
  EXPECT_TRUE(rejected(file_bytes(header, data_bytes(8)), {"'t'", "more than once"}));
  std::string inner = R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_TRUE(rejected(file_bytes(inner, data_bytes(8)), {"'dtype'", "more than once"}));
}

// ---- rejected files: entries ---------------------------------------------------------

// A file with one tensor entry `t` = `entry` and `data` bytes of data.
std::string one_entry(const std::string& entry, size_t data = 8) {
  return file_bytes(R"({"t":)" + entry + "}", data_bytes(data));
}

// `levels` nested JSON arrays: "[[[...]]]".
std::string nested_arrays(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// A valid header nests 3 deep; anything deeper is refused while parsing, before the header
// is built or printed, so a small file nesting 100000 deep fails cleanly instead of
// exhausting the stack. Under ASan this also checks that nothing recurses per level.
TEST(SafetensorsRejects, DeepNesting) {
  const std::string deep = nested_arrays(100000);
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,8]})"),
                       {"nests deeper", "(depth 4 > 3 under 't'"}));
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":{"n":)" + deep + "}}"),
                       {"nests deeper", "(depth 4 > 3 under '__metadata__'"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":)" + deep + "}"),
                       {"nests deeper", "(depth 4 > 3 under 't'"}));
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"a":)";
  EXPECT_TRUE(
      rejected(file_bytes(objects + "1" + std::string(100000, '}')), {"nests deeper", "(depth 4 > 3 under 'a'"}));
  EXPECT_TRUE(rejected(file_bytes(deep), {"nests deeper", "(depth 4 > 3;"}));
}

TEST(SafetensorsRejects, OneLevelTooDeep) {
  // An array inside shape parses (depth 3 is allowed); a value inside it is at depth 4.
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[[2]],"data_offsets":[0,8]})"), {"'t'", "(depth 4 > 3"}));
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":{"n":{"a":["b"]}}})"), {"(depth 4 > 3"}));
  // Empty containers at depth 3 are no deeper than a valid header; their messages give
  // the type and size only.
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[[]],"data_offsets":[0,8]})"),
                       {"'t'", "shape entry array of 0 elements at dimension 0"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[{},8]})"),
                       {"'t'", "data_offsets [object of 0 keys, 8]", "non-negative integers"}));
}

TEST(SafetensorsRejects, UnknownDtype) {
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})"), {"'t'", "'F64'", "not support"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"XYZ","shape":[2],"data_offsets":[0,8]})"), {"'t'", "'XYZ'"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), {"'f32'"}));
}

TEST(SafetensorsRejects, NegativeOrNonIntegerShape) {
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), {"'t'", "-2", "non-negative"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
                       {"'t'", "2.0", "non-negative integers"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), {"\"2\""}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]})"),
                       {"9223372036854775808"}));
}

TEST(SafetensorsRejects, TooManyDimensions) {
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[1,1,1,1,1,2],"data_offsets":[0,8]})"),
                       {"'t'", "6 dimensions", "at most 5"}));
}

TEST(SafetensorsRejects, ShapeWhoseElementCountOverflows) {
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]})"),
                       {"'t'", "overflows"}));
  // numel fits in 63 bits but numel * 8 bytes does not fit in 64.
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,8]})"),
                       {"'t'", "more than 2^64", "span 8 bytes"}));
}

TEST(SafetensorsRejects, ShapeAndDtypeDoNotMatchTheByteRange) {
  std::string header = R"({"fc.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[0,40]}})";
  EXPECT_TRUE(rejected(file_bytes(header, data_bytes(40)),
                       {"bad.safetensors: tensor 'fc.weight' has shape [3, 4] (48 bytes as F32) "
                        "but data_offsets span 40 bytes"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,8]})"),
                       {"(4 bytes as BF16)", "span 8 bytes"}));
}

TEST(SafetensorsRejects, BadDataOffsets) {
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), {"'t'", "[8, 0]", "begin after end"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), {"'t'", "non-negative"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), {"'t'", "[begin, end]"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,16]})"), {"'t'", "[begin, end]"}));
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.5]})"), {"'t'", "non-negative integers"}));
}

TEST(SafetensorsRejects, MissingKeys) {
  EXPECT_TRUE(rejected(one_entry(R"({"shape":[2],"data_offsets":[0,8]})"), {"'t'", "no 'dtype'"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","data_offsets":[0,8]})"), {"'t'", "no 'shape'"}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2]})"), {"'t'", "no 'data_offsets'"}));
}

TEST(SafetensorsRejects, UnexpectedKey) {
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"), {"'t'", "unexpected key 'x'"}));
}

TEST(SafetensorsRejects, WrongTypes) {
  EXPECT_TRUE(rejected(one_entry("3"), {"'t'", "must be an object", "got number"}));
  EXPECT_TRUE(rejected(one_entry("[]"), {"'t'", "got array"}));
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":32,"shape":[2],"data_offsets":[0,8]})"), {"'t'", "dtype that is not a string"}));
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), {"'t'", "shape that is not an array"}));
  EXPECT_TRUE(
      rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":"0,8"})"), {"'t'", "data_offsets \"0,8\""}));
  EXPECT_TRUE(rejected(one_entry(R"({"dtype":"F32","shape":[2],"data_offsets":{"0":8}})"), {"'t'", "[begin, end]"}));
}

TEST(SafetensorsRejects, MetadataThatIsNotStringToString) {
  std::string tensor = "," + f32_pair("t", 0) + "}";
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":{"n":3})" + tensor, data_bytes(8)),
                       {"__metadata__", "'n'", "must be a string", "got number"}));
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":{"n":{"a":"b"}})" + tensor, data_bytes(8)),
                       {"'n'", "got object of 1 key"}));
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":{"n":[1,2]})" + tensor, data_bytes(8)),
                       {"'n'", "got array of 2 elements"}));
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":["a"])" + tensor, data_bytes(8)),
                       {"__metadata__", "must be an object", "got array"}));
  EXPECT_TRUE(rejected(file_bytes(R"({"__metadata__":null})", ""), {"__metadata__", "got null"}));
}

// ---- rejected files: layout of the data section --------------------------------------

TEST(SafetensorsRejects, OverlappingRanges) {
  std::string header = "{" + f32_pair("a", 0) + "," + f32_pair("b", 4) + "}";
  EXPECT_TRUE(rejected(file_bytes(header, data_bytes(12)), {"'b'", "overlap", "'a'"}));
  std::string same = "{" + f32_pair("a", 0) + "," + f32_pair("b", 0) + "}";
  EXPECT_TRUE(rejected(file_bytes(same, data_bytes(8)), {"overlap"}));
  // A zero-element tensor inside another tensor's range also overlaps it.
  std::string inside = "{" + f32_pair("a", 0) + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  EXPECT_TRUE(rejected(file_bytes(inside, data_bytes(8)), {"'e'", "overlap", "'a'"}));
}

TEST(SafetensorsRejects, GapBetweenTensors) {
  std::string header = "{" + f32_pair("a", 0) + "," + f32_pair("b", 12) + "}";
  EXPECT_TRUE(rejected(file_bytes(header, data_bytes(20)), {"bytes [8, 12)", "'b'", "gap"}));
  EXPECT_TRUE(rejected(file_bytes("{" + f32_pair("a", 4) + "}", data_bytes(12)), {"bytes [0, 4)", "gap"}));
}

TEST(SafetensorsRejects, RangeOutsideTheData) {
  EXPECT_TRUE(rejected(file_bytes("{" + f32_pair("a", 8) + "}", data_bytes(8)),
                       {"'a'", "[8, 16]", "beyond the data section of 8 bytes"}));
  std::string far = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})";
  EXPECT_TRUE(rejected(file_bytes(far, ""), {"'a'", "beyond the data section"}));
}

TEST(SafetensorsRejects, TrailingBytes) {
  EXPECT_TRUE(rejected(file_bytes("{" + f32_pair("a", 0) + "}", data_bytes(11)), {"3 trailing bytes"}));
  EXPECT_TRUE(rejected(file_bytes("{}", "x"), {"1 trailing bytes"}));
}

// ---- files on disk -------------------------------------------------------------------

class SafetensorsFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return temp_.file(name); }
  std::set<std::string> listing() const { return temp_.names(); }
  static void write_text(const std::string& file, const std::string& text) {
    std::ofstream(file, std::ios::binary) << text;
  }
  static std::string read_text(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  test::TempDir temp_{"st"};
  const fs::path dir_ = temp_.path();
};

TEST_F(SafetensorsFiles, SampleRoundTripsThroughAFile) {
  std::string target = path("sample.safetensors");
  NamedTensors tensors = parity::make_sample();
  save_safetensors(target, tensors, parity::sample_metadata());
  SafetensorsFile file = load_safetensors(target);
  expect_same_tensors(file, tensors);
  EXPECT_EQ(file.metadata, parity::sample_metadata());
}

TEST_F(SafetensorsFiles, LoadingAMissingFileNamesThePathAndTheReason) {
  std::string missing = path("missing.safetensors");
  EXPECT_TRUE(throws_error([&] { load_safetensors(missing); }, {missing + ": ", std::strerror(ENOENT)}));
}

TEST_F(SafetensorsFiles, LoadingADirectoryIsRefused) {
  EXPECT_TRUE(throws_error([&] { load_safetensors(dir_.string()); }, {"not a regular file"}));
}

TEST_F(SafetensorsFiles, LoadingABadFileNamesThePath) {
  write_text(path("junk.safetensors"), "junk");
  EXPECT_TRUE(throws_error([&] { load_safetensors(path("junk.safetensors")); },
                           {path("junk.safetensors") + ": ", "too short"}));
}

TEST_F(SafetensorsFiles, SaveReplacesAnExistingFile) {
  std::string target = path("model.safetensors");
  write_text(target, "old contents");
  NamedTensors tensors = parity::make_sample();
  save_safetensors(target, tensors);
  expect_same_tensors(load_safetensors(target), tensors);
  EXPECT_EQ(listing(), std::set<std::string>{"model.safetensors"});
}

TEST_F(SafetensorsFiles, SaveIntoAMissingDirectoryFailsCleanly) {
  std::string target = path("no_such_dir/model.safetensors");
  EXPECT_TRUE(throws_error([&] { save_safetensors(target, parity::make_sample()); }, {target, std::strerror(ENOENT)}));
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsFiles, FailedSaveLeavesTheExistingFileIntact) {
  // The temporary file's name is the target's plus ".tmp.XXXXXX"; a target name 250 bytes
  // long is allowed but its temporary's exceeds NAME_MAX (255), so creating it fails.
  // (The tests run as root, so a directory without write permission would not stop it.)
  std::string name = std::string(250 - std::string(".safetensors").size(), 'm') + ".safetensors";
  std::string target = path(name);
  write_text(target, "old contents");
  ASSERT_EQ(read_text(target), "old contents");
  EXPECT_TRUE(throws_error([&] { save_safetensors(target, parity::make_sample()); },
                           {target, "temporary file", std::strerror(ENAMETOOLONG)}));
  EXPECT_EQ(read_text(target), "old contents");
  EXPECT_EQ(listing(), std::set<std::string>{name});
}

TEST_F(SafetensorsFiles, TemporaryNameIsNotDerivedFromTheProcessId) {
  // Ranks on different hosts share process ids; a name made from one would collide on a
  // shared filesystem. Something already at such a name must not disturb the save.
  std::string target = path("model.safetensors");
  std::string pid_name = "model.safetensors.tmp." + std::to_string(::getpid());
  fs::create_directory(path(pid_name));
  NamedTensors tensors = parity::make_sample();
  save_safetensors(target, tensors);
  expect_same_tensors(load_safetensors(target), tensors);
  EXPECT_EQ(listing(), (std::set<std::string>{"model.safetensors", pid_name}));
}

TEST_F(SafetensorsFiles, SavedFileHasTheModeOfANewFile) {
  // 0666 less the umask, as for any file the process creates (mkstemp alone gives 0600).
  mode_t mask = ::umask(027);
  std::string target = path("model.safetensors");
  save_safetensors(target, parity::make_sample());
  ::umask(mask);
  struct stat info {};
  ASSERT_EQ(::stat(target.c_str(), &info), 0) << std::strerror(errno);
  EXPECT_EQ(info.st_mode & 0777, mode_t(0640));
}

TEST_F(SafetensorsFiles, FailedRenameRemovesTheTemporaryFile) {
  // Renaming a file over a non-empty directory fails after the data was written.
  std::string target = path("model.safetensors");
  fs::create_directory(target);
  write_text(target + "/keep", "kept");
  EXPECT_TRUE(throws_error([&] { save_safetensors(target, parity::make_sample()); }, {target, "rename"}));
  EXPECT_EQ(listing(), std::set<std::string>{"model.safetensors"});
  EXPECT_EQ(read_text(target + "/keep"), "kept");
}

TEST_F(SafetensorsFiles, RefusedTensorsWriteNothing) {
  std::string target = path("model.safetensors");
  Tensor t = random_tensor(Shape{2}, 1);
  EXPECT_THROW(save_safetensors(target, {{"a", t}, {"a", t}}), Error);
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsFiles, SaveInTheCurrentDirectoryByRelativePath) {
  fs::path previous = fs::current_path();
  fs::current_path(dir_);
  NamedTensors tensors = {{"x", random_tensor(Shape{4}, 2)}};
  save_safetensors("relative.safetensors", tensors);
  fs::current_path(previous);
  expect_same_tensors(load_safetensors(path("relative.safetensors")), tensors);
}

}  // namespace
}  // namespace gridnn
