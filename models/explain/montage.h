// A Grad-CAM montage: three orthogonal slices of a volume with its heat map over them.
//
// Volumes are [D, H, W] CPU f32 in canonical RAS+ voxel order: w (i) runs to the subject's
// Right, h (j) to Anterior, d (k) to Superior (models/data/orientation.h).
//
// Orientation, neurological convention: every panel shows the increasing index of its
// horizontal axis to the right and the highest index of its vertical axis at the top.
//   axial    (fixed d): subject's left on the image's left, right on the right; anterior up
//   coronal  (fixed h): left on the left, right on the right; superior up
//   sagittal (fixed w): posterior on the left, anterior on the right; superior up
// The margins carry the letters: L/R, P/A, I/S on the low/high side of each axis; a volume
// in another voxel order (gridnn-predict --orientation native) is drawn the same way without
// them (canonical = false).
//
// Intensities: the anatomy is grey, windowed linearly between its 1st and 99th percentiles
// of its finite values (when they coincide, voxels above them are white, the rest black;
// non-finite voxels are black). The heat (clamped to [0, 1], NaN as 0) is coloured by a jet
// map (blue, cyan, yellow, red, dark red at 1) over the grey with opacity
// 0.3 + 0.5 * (heat - 0.2) / 0.8 from the threshold 0.2 up; below it nothing is drawn.
//
// Colour bar: the jet colours themselves (opaque), heat 1 in the top row down to 0 in the
// bottom row (row r of n shows (n - 1 - r) / (n - 1)); the part below the threshold, which
// the panels leave grey, is dimmed to a quarter of its colour. White ticks on its right at
// 1, 0.2 and 0 carry the labels "1", "0.2" and "0" (core/png.h's font, font_scale).
//
// Region outline (render_montage's optional `region`): a voxel is inside when its value is
// above 0.5. In each panel the pixels of inside voxels whose in-plane 4-neighbour voxel in
// some direction is outside (or beyond the slice's edge) are magenta (255, 0, 255), drawn
// over the heat: the band of line_width pixels (at most the voxel's own) along that side.
// Neither the jet map nor the grey ever gives pure magenta.
//
// Geometry: pixels are square in millimetres. At zoom 1 a pixel is the finest voxel
// spacing; an axis of n voxels of spacing s spans zoom * round(n * s / finest) pixels, each
// pixel showing its nearest voxel. Zoom 0 picks round(300 / tallest panel at zoom 1), at
// least 1 (91x109x91 at 1 mm: zoom 3, panels 273-327 px tall). Panels stand side by side,
// axial, coronal, sagittal, on black, centred vertically in one row, each with a margin on
// every side and one margin's gap between two. The colour bar follows one margin's gap after
// the sagittal panel's right margin: one margin wide, as tall as the tallest panel, its top
// level with the panels' row; then 2 * font_scale of tick, 5 * font_scale of space (so that a
// tick does not read as a minus sign), the widest label ("0.2") and a margin end the image.
#pragma once

#include <array>
#include <cstdint>

#include "core/png.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace gridnn::explain {

// Where one slice lies in the montage, in pixels.
struct PanelRect {
  int64_t x = 0, y = 0, width = 0, height = 0;
};

struct MontageLayout {
  int zoom = 1;
  int font_scale = 1;               // of the orientation letters (core/png.h's 5x7 font)
  int64_t margin = 0;               // around each panel, holding the letters; also the gap between
  int64_t line_width = 1;           // of the region outline: font_scale pixels
  std::array<PanelRect, 3> panels;  // axial, coronal, sagittal
  PanelRect bar;                    // the colour bar
  int64_t width = 0, height = 0;
};

// The layout for a volume of `shape` [D, H, W] and voxel `spacing` {d, h, w} in mm.
MontageLayout montage_layout(const Shape& shape, std::array<double, 3> spacing, int zoom = 0);

// The three slices through `centre` (a voxel index {d, h, w}) of `anatomy` with `heat` (same
// shape) over them, the colour bar, and the outline of `region` when it is defined (a mask of
// the anatomy's shape, CPU f32). gridnn::Error for tensors that are not CPU f32 [D, H, W] of
// one shape, a centre outside the volume, a spacing not positive or a negative zoom.
RgbImage render_montage(const Tensor& anatomy, const Tensor& heat, std::array<int64_t, 3> centre,
                        std::array<double, 3> spacing = {1, 1, 1}, int zoom = 0, bool canonical = true,
                        const Tensor& region = Tensor());

// The voxel {d, h, w} of the largest value (the first in memory order on ties; NaN never wins).
std::array<int64_t, 3> peak_voxel(const Tensor& heat);

}  // namespace gridnn::explain
