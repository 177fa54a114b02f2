// Test helper for check_orientation_nibabel.py: reads one NIfTI scan as NiftiDataset does
// (orientation, optional spacing; crop fit to the oriented dims, no normalisation) and writes
//   OUT.npy         the network-space tensor [D, H, W] as float32 .npy;
//   OUT.affine.txt  the 4x4 affine of that grid (grid_affine), then the scan's affine, 17 digits;
//   OUT.heat.nii.gz the tensor mapped back to the stored grid (map_to_stored) and written
//                   with the scan's geometry (write_nifti_like).
// usage: dump_canonical SCAN OUT [canonical|native] [SPACING_MM]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "core/error.h"
#include "models/data/nifti_dataset.h"
#include "models/data/nifti_volume.h"
#include "models/data/orientation.h"

namespace {

void write_npy(const std::string& path, const gridnn::Tensor& t) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(t.size(0)) + ", " +
                       std::to_string(t.size(1)) + ", " + std::to_string(t.size(2)) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = uint16_t(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(t.data<float>()), std::streamsize(t.numel() * 4));
  if (!out) throw gridnn::Error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: dump_canonical SCAN OUT [canonical|native] [SPACING_MM]\n";
    return 2;
  }
  try {
    const std::string scan = argv[1], out = argv[2];
    gridnn::data::NiftiDatasetOptions o;
    o.orientation = gridnn::parse_enum<gridnn::data::Orientation>(argc > 3 ? argv[3] : "canonical");
    o.spacing = argc > 4 ? std::stod(argv[4]) : 0.0;
    o.normalize = false;
    // The target: the oriented (and resampled) dims, so the crop fit is the identity.
    const gridnn::data::ScanGeometry g = gridnn::data::read_nifti_geometry(scan);
    gridnn::data::GridVolume grid;
    grid.volume = gridnn::Tensor::zeros({g.dims[0], g.dims[1], g.dims[2]});
    grid = gridnn::data::orient(grid.volume, g, o.orientation);
    if (o.spacing > 0) grid = gridnn::data::resample_to_spacing(grid, o.spacing);
    o.target = {grid.volume.size(0), grid.volume.size(1), grid.volume.size(2)};
    gridnn::data::Manifest m;
    m.source = "dump_canonical";
    m.rows.push_back({scan, 0, gridnn::data::Split::unassigned, 1});
    const gridnn::data::Scan s = gridnn::data::NiftiDataset(m, o).load_scan(0);
    write_npy(out + ".npy", s.volume);
    const gridnn::data::Affine net = gridnn::data::grid_affine(s.stored.affine, s.to_stored);
    std::FILE* f = std::fopen((out + ".affine.txt").c_str(), "w");
    if (!f) throw gridnn::Error("cannot write " + out + ".affine.txt");
    for (const auto* a : {&net, &s.stored.affine})
      for (const auto& row : *a) std::fprintf(f, "%.17g %.17g %.17g %.17g\n", row[0], row[1], row[2], row[3]);
    std::fprintf(f, "%s\n", gridnn::data::affine_source_name(s.stored.source));
    std::fclose(f);
    gridnn::data::write_nifti_like(out + ".heat.nii.gz",
                                   gridnn::data::map_to_stored(s.volume, s.to_stored, s.stored.dims), scan);
  } catch (const std::exception& e) {
    std::cerr << "dump_canonical: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
