#include "core/png.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/file_io.h"

namespace gridnn {
namespace {

// ---- the font --------------------------------------------------------------------------

// Seven rows of five dots each, bit 4 the leftmost column.
struct Glyph {
  char c;
  std::array<uint8_t, kGlyphHeight> rows;
};

constexpr Glyph kFont[] = {
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}}, {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11}}, {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}}, {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}}, {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}}, {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
};

const Glyph& glyph(char c) {
  for (const Glyph& g : kFont)
    if (g.c == c) return g;
  throw Error(detail::concat("draw_text: the 5x7 font has no glyph for '", c, "' (char ", int(c), ")"));
}

// ---- PNG -------------------------------------------------------------------------------

void append_u32_be(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xFF));
}

// Length, type, data, CRC-32 of type and data.
void append_chunk(std::string& out, const char type[4], const std::string& data) {
  append_u32_be(out, uint32_t(data.size()));
  const size_t type_at = out.size();
  out.append(type, 4);
  out += data;
  const auto* crc_bytes = reinterpret_cast<const Bytef*>(out.data() + type_at);
  append_u32_be(out, uint32_t(crc32(crc32(0L, Z_NULL, 0), crc_bytes, uInt(4 + data.size()))));
}

std::string encode_png(const std::string& path, const RgbImage& image) {
  // PNG allows 2^31 - 1 pixels a side; 2^24 keeps every byte count here far from overflow.
  constexpr int64_t kMaxSide = int64_t(1) << 24;
  GRIDNN_REQUIRE(image.width > 0 && image.height > 0 && image.width <= kMaxSide && image.height <= kMaxSide,
                 "write_png ", path, ": image size ", image.width, "x", image.height, " must be positive and at most ",
                 kMaxSide, " per side");
  const size_t row_bytes = size_t(3 * image.width);
  GRIDNN_REQUIRE(image.rgb.size() == row_bytes * size_t(image.height), "write_png ", path, ": ", image.rgb.size(),
                 " bytes of pixels for a ", image.width, "x", image.height, " RGB image (",
                 row_bytes * size_t(image.height), " expected)");

  std::string scanlines;
  scanlines.reserve((row_bytes + 1) * size_t(image.height));
  for (int64_t y = 0; y < image.height; ++y) {
    scanlines.push_back('\0');  // filter type 0: None
    scanlines.append(reinterpret_cast<const char*>(image.rgb.data()) + size_t(y) * row_bytes, row_bytes);
  }
  uLongf compressed_size = compressBound(uLong(scanlines.size()));
  std::string compressed(compressed_size, '\0');
  const int rc =
      compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_size,
                reinterpret_cast<const Bytef*>(scanlines.data()), uLong(scanlines.size()), Z_DEFAULT_COMPRESSION);
  GRIDNN_REQUIRE(rc == Z_OK, "write_png ", path, ": zlib compress2 failed (", rc, ")");
  compressed.resize(compressed_size);
  GRIDNN_REQUIRE(compressed.size() <= size_t(std::numeric_limits<int32_t>::max()), "write_png ", path,
                 ": the compressed image (", compressed.size(), " bytes) exceeds a PNG chunk");

  std::string header;
  append_u32_be(header, uint32_t(image.width));
  append_u32_be(header, uint32_t(image.height));
  header += std::string{char(8), char(2), char(0), char(0), char(0)};  // depth, RGB, deflate, filter, no interlace

  std::string png("\x89PNG\r\n\x1a\n", 8);
  append_chunk(png, "IHDR", header);
  append_chunk(png, "IDAT", compressed);
  append_chunk(png, "IEND", "");
  return png;
}

}  // namespace

RgbImage RgbImage::filled(int64_t width, int64_t height, Rgb colour) {
  GRIDNN_REQUIRE(width >= 0 && height >= 0, "RgbImage: negative size ", width, "x", height);
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(size_t(3 * width * height));
  for (size_t i = 0; i < image.rgb.size(); i += 3) {
    image.rgb[i] = colour.r;
    image.rgb[i + 1] = colour.g;
    image.rgb[i + 2] = colour.b;
  }
  return image;
}

Rgb RgbImage::pixel(int64_t x, int64_t y) const {
  GRIDNN_REQUIRE(x >= 0 && y >= 0 && x < width && y < height, "RgbImage::pixel: (", x, ", ", y, ") lies outside the ",
                 width, "x", height, " image");
  const uint8_t* p = rgb.data() + 3 * (y * width + x);
  return {p[0], p[1], p[2]};
}

void RgbImage::set(int64_t x, int64_t y, Rgb colour) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  uint8_t* p = rgb.data() + 3 * (y * width + x);
  p[0] = colour.r;
  p[1] = colour.g;
  p[2] = colour.b;
}

void fill_rect(RgbImage& image, int64_t x, int64_t y, int64_t width, int64_t height, Rgb colour) {
  const int64_t x0 = std::max<int64_t>(x, 0), x1 = std::min(x + width, image.width);
  const int64_t y0 = std::max<int64_t>(y, 0), y1 = std::min(y + height, image.height);
  for (int64_t row = y0; row < y1; ++row)
    for (int64_t col = x0; col < x1; ++col) image.set(col, row, colour);
}

int64_t text_width(const std::string& text, int scale) {
  return text.empty() ? 0 : (int64_t(text.size()) * kGlyphAdvance - 1) * scale;
}

void draw_text(RgbImage& image, int64_t x, int64_t y, const std::string& text, Rgb colour, int scale) {
  GRIDNN_REQUIRE(scale >= 1, "draw_text: scale ", scale, " must be at least 1");
  for (size_t i = 0; i < text.size(); ++i) {
    const Glyph& g = glyph(text[i]);
    const int64_t left = x + int64_t(i) * kGlyphAdvance * scale;
    for (int64_t row = 0; row < kGlyphHeight; ++row)
      for (int64_t col = 0; col < kGlyphWidth; ++col)
        if (g.rows[size_t(row)] & (0x10 >> col))
          fill_rect(image, left + col * scale, y + row * scale, scale, scale, colour);
  }
}

void write_png(const std::string& path, const RgbImage& image) { write_file_atomically(path, encode_png(path, image)); }

}  // namespace gridnn
