// core/png.h: the file write_png leaves is read back here byte by byte (signature, IHDR,
// each chunk's CRC-32, the IDAT inflated by zlib and compared with the pixels), plus the
// drawing primitives and the errors.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "core/png.h"
#include "test/support/error_message.h"
#include "test/support/temp_dir.h"

namespace gridnn {
namespace {

uint32_t read_u32_be(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | uint8_t(bytes.at(at + i));
  return v;
}

struct Chunk {
  std::string type, data;
};

// Splits a PNG file into its chunks, checking the signature and every CRC on the way.
std::vector<Chunk> read_chunks(const std::string& bytes) {
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::vector<Chunk> chunks;
  size_t at = 8;
  while (at < bytes.size()) {
    const uint32_t length = read_u32_be(bytes, at);
    EXPECT_LE(at + 12 + length, bytes.size()) << "chunk at " << at << " runs past the file";
    if (at + 12 + length > bytes.size()) break;
    Chunk chunk{bytes.substr(at + 4, 4), bytes.substr(at + 8, length)};
    const uint32_t stored_crc = read_u32_be(bytes, at + 8 + length);
    const auto* typed = reinterpret_cast<const Bytef*>(bytes.data() + at + 4);
    const uint32_t crc = uint32_t(crc32(crc32(0L, Z_NULL, 0), typed, uInt(4 + length)));
    EXPECT_EQ(stored_crc, crc) << "CRC of chunk " << chunk.type;
    chunks.push_back(chunk);
    at += 12 + length;
  }
  return chunks;
}

// A w x h image whose every byte differs from its neighbours' (so a swapped row, column or
// channel shows).
RgbImage pattern_image(int64_t w, int64_t h) {
  RgbImage image;
  image.width = w;
  image.height = h;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) image.rgb.push_back(uint8_t(7 * x + 31 * y + 101 * c));
  return image;
}

class PngFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return temp_.file(name); }
  std::set<std::string> listing() const { return temp_.names(); }
  static std::string read_file(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  test::TempDir temp_{"png"};
};

TEST_F(PngFiles, ChunksHeaderAndScanlinesMatchThePixels) {
  for (auto [w, h] : {std::pair<int64_t, int64_t>{3, 2}, {1, 1}, {37, 23}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    const RgbImage image = pattern_image(w, h);
    write_png(path("image.png"), image);
    const std::vector<Chunk> chunks = read_chunks(read_file(path("image.png")));
    ASSERT_EQ(chunks.size(), 3u);
    EXPECT_EQ(chunks[0].type, "IHDR");
    EXPECT_EQ(chunks[1].type, "IDAT");
    EXPECT_EQ(chunks[2].type, "IEND");
    EXPECT_TRUE(chunks[2].data.empty());

    const std::string& ihdr = chunks[0].data;
    ASSERT_EQ(ihdr.size(), 13u);
    EXPECT_EQ(read_u32_be(ihdr, 0), uint32_t(w));
    EXPECT_EQ(read_u32_be(ihdr, 4), uint32_t(h));
    EXPECT_EQ(ihdr.substr(8), std::string("\x08\x02\x00\x00\x00",
                                          5));  // 8 bits, RGB, deflate, filter 0, no interlace

    const size_t row = size_t(3 * w);
    std::vector<uint8_t> scanlines((row + 1) * size_t(h) + 1);  // one spare byte: inflating must stop short of it
    uLongf size = uLongf(scanlines.size());
    ASSERT_EQ(uncompress(scanlines.data(), &size, reinterpret_cast<const Bytef*>(chunks[1].data.data()),
                         uLong(chunks[1].data.size())),
              Z_OK);
    ASSERT_EQ(size, (row + 1) * size_t(h));
    for (int64_t y = 0; y < h; ++y) {
      const uint8_t* line = scanlines.data() + size_t(y) * (row + 1);
      EXPECT_EQ(line[0], 0) << "filter type of row " << y;
      EXPECT_TRUE(std::equal(line + 1, line + 1 + row, image.rgb.begin() + std::ptrdiff_t(size_t(y) * row)))
          << "row " << y;
    }
  }
  EXPECT_EQ(listing(), std::set<std::string>{"image.png"});  // no temporary file left
}

TEST_F(PngFiles, PythonZlibReadsTheSameScanlines) {
  if (std::system("python3 -c 'import zlib' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  write_png(path("p.png"), pattern_image(4, 3));
  // Python parses the chunks itself and prints the pixel bytes of row 2 (after the filter byte).
  const std::string script =
      "import struct, zlib, sys\n"
      "b = open(sys.argv[1], 'rb').read()\n"
      "at, idat = 8, b''\n"
      "while at < len(b):\n"
      "    n, = struct.unpack('>I', b[at:at+4]); t = b[at+4:at+8]\n"
      "    if t == b'IDAT': idat += b[at+8:at+8+n]\n"
      "    at += 12 + n\n"
      "raw = zlib.decompress(idat)\n"
      "print(' '.join(str(v) for v in raw[2*13+1:3*13]))\n";
  std::ofstream(path("read.py")) << script;
  const std::string out = path("out.txt");
  ASSERT_EQ(std::system(("python3 " + path("read.py") + " " + path("p.png") + " > " + out).c_str()), 0);
  std::string expected;
  const RgbImage image = pattern_image(4, 3);
  for (size_t i = 24; i < 36; ++i) expected += (i > 24 ? " " : "") + std::to_string(image.rgb[i]);
  EXPECT_EQ(read_file(out), expected + "\n");
}

TEST_F(PngFiles, OverwritesAnExistingFileWhole) {
  write_png(path("a.png"), pattern_image(5, 5));
  write_png(path("a.png"), pattern_image(2, 1));
  const std::vector<Chunk> chunks = read_chunks(read_file(path("a.png")));
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(read_u32_be(chunks[0].data, 0), 2u);
  EXPECT_EQ(listing(), std::set<std::string>{"a.png"});
}

TEST_F(PngFiles, ErrorsNameTheFile) {
  const std::string missing_dir = path("no/such/dir/x.png");
  std::string message = test::error_message([&] { write_png(missing_dir, pattern_image(2, 2)); });
  EXPECT_NE(message.find(missing_dir), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(ENOENT)), std::string::npos) << message;

  RgbImage short_of_bytes = pattern_image(2, 2);
  short_of_bytes.rgb.pop_back();
  message = test::error_message([&] { write_png(path("short.png"), short_of_bytes); });
  EXPECT_NE(message.find("short.png"), std::string::npos) << message;
  EXPECT_NE(message.find("11 bytes of pixels"), std::string::npos) << message;

  message = test::error_message([&] { write_png(path("empty.png"), RgbImage{}); });
  EXPECT_NE(message.find("must be positive"), std::string::npos) << message;
  EXPECT_TRUE(listing().empty());
}

TEST(RgbImageDrawing, FillClipsAndTextDrawsItsGlyphs) {
  RgbImage image = RgbImage::filled(20, 10, {10, 20, 30});
  EXPECT_EQ(image.pixel(19, 9), (Rgb{10, 20, 30}));
  fill_rect(image, -5, 8, 7, 100, {1, 2, 3});  // clipped to x 0..1, y 8..9
  EXPECT_EQ(image.pixel(1, 9), (Rgb{1, 2, 3}));
  EXPECT_EQ(image.pixel(2, 9), (Rgb{10, 20, 30}));
  EXPECT_EQ(image.pixel(1, 7), (Rgb{10, 20, 30}));
  EXPECT_NE(test::error_message([&] { image.pixel(20, 0); }).find("outside the 20x10 image"), std::string::npos);

  // 'L' at scale 2: its vertical stroke is the leftmost column, its foot the bottom row.
  RgbImage text = RgbImage::filled(30, 20, {0, 0, 0});
  draw_text(text, 3, 2, "L", {255, 255, 255}, 2);
  EXPECT_EQ(text.pixel(3, 2), (Rgb{255, 255, 255}));
  EXPECT_EQ(text.pixel(4, 3), (Rgb{255, 255, 255}));
  EXPECT_EQ(text.pixel(5, 2), (Rgb{0, 0, 0}));                 // column 1 of row 0 is empty
  EXPECT_EQ(text.pixel(3 + 9, 2 + 13), (Rgb{255, 255, 255}));  // the foot's right end
  EXPECT_EQ(text.pixel(3 + 10, 2 + 13), (Rgb{0, 0, 0}));
  EXPECT_EQ(text_width("AUC", 2), (3 * 6 - 1) * 2);
  EXPECT_NE(test::error_message([&] { draw_text(text, 0, 0, "x", {}, 1); }).find("no glyph for 'x'"),
            std::string::npos);
}

}  // namespace
}  // namespace gridnn
