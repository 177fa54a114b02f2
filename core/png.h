// RgbImage: an 8-bit RGB raster; the few drawing primitives the plots share (filled
// rectangles, 5x7 bitmap text); and write_png.
//
// Pixel (x, y) is column x from the left, row y from the top; its three bytes start at
// rgb[3 * (y * width + x)]. Drawing clips to the image: pixels outside are skipped.
//
// write_png writes a truecolour PNG (colour type 2, bit depth 8, no interlace): the
// signature, IHDR, one IDAT holding the zlib stream of the scanlines (each prefixed by
// filter type 0, None), IEND, every chunk with its CRC-32. The file appears whole or not at
// all: it is written to a temporary file beside `path` and renamed over it. Failures raise
// gridnn::Error naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gridnn {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
  bool operator!=(const Rgb& o) const { return !(*this == o); }
};

// An 8-bit RGB image, row-major, rows top to bottom.
struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // 3 * width * height

  // A width x height image of one colour.
  static RgbImage filled(int64_t width, int64_t height, Rgb colour);
  // The pixel at (x, y); gridnn::Error when outside the image.
  Rgb pixel(int64_t x, int64_t y) const;
  // Sets (x, y) when it lies inside the image.
  void set(int64_t x, int64_t y, Rgb colour);
};

// Fills the rectangle of `width` x `height` pixels whose top-left corner is (x, y).
void fill_rect(RgbImage& image, int64_t x, int64_t y, int64_t width, int64_t height, Rgb colour);

// 5x7 glyphs, each `scale` x `scale` pixels per dot, advancing 6 * scale per character.
// The font holds the digits, '.', ' ' and the capitals A C F I L P R S T U; any other
// character is a gridnn::Error.
constexpr int64_t kGlyphWidth = 5, kGlyphHeight = 7, kGlyphAdvance = 6;
int64_t text_width(const std::string& text, int scale);
// Draws `text` with its top-left corner at (x, y).
void draw_text(RgbImage& image, int64_t x, int64_t y, const std::string& text, Rgb colour, int scale);

void write_png(const std::string& path, const RgbImage& image);

}  // namespace gridnn
