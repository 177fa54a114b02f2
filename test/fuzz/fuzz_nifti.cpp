// libFuzzer target for the NIfTI data path: the first byte of the input picks what the
// rest is fed to, and every input must either be accepted or raise gridnn::Error, never
// crash, hang, leak or trip a sanitizer. See test/fuzz/CMakeLists.txt.
//   byte 0 % 3 == 0: the CSV manifest parser (parse_manifest);
//              == 1: read_nifti_volume on the bytes written to a .nii file;
//              == 2: the same as a .nii.gz file (the bytes may be gzip or plain: zlib
//                    reads both).
// The NIfTI reader needs a file, so the bytes go to a scratch file of this process.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "models/data/manifest.h"
#include "models/data/nifti_volume.h"

namespace {

// A scratch file per process and suffix, removed at exit.
struct ScratchFile {
  explicit ScratchFile(const char* suffix) : path("/tmp/gridnn_fuzz_nifti_" + std::to_string(::getpid()) + suffix) {}
  ~ScratchFile() { std::remove(path.c_str()); }
  bool write(const uint8_t* data, size_t size) const {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    const bool ok = std::fwrite(data, 1, size, f) == size;
    return std::fclose(f) == 0 && ok;
  }
  std::string path;
};

void read_volume(const ScratchFile& file, const uint8_t* data, size_t size) {
  if (!file.write(data, size)) return;
  const gridnn::Tensor volume = gridnn::data::read_nifti_volume(file.path);
  // Every voxel must have been written: read them all (MSan/ASan would flag garbage).
  volatile float sink = 0.0f;
  const float* x = volume.data<float>();
  for (int64_t v = 0; v < volume.numel(); ++v) sink = sink + x[v];
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile plain(".nii"), gzipped(".nii.gz");
  if (size == 0) return 0;
  try {
    switch (data[0] % 3) {
      case 0: {
        const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
        const gridnn::data::Manifest m = gridnn::data::parse_manifest(text, "fuzz.csv", "/base");
        for (const auto& row : m.rows)
          if (row.path.empty() || row.label < 0) __builtin_trap();  // the parser promises both
        break;
      }
      case 1:
        read_volume(plain, data + 1, size - 1);
        break;
      default:
        read_volume(gzipped, data + 1, size - 1);
        break;
    }
  } catch (const gridnn::Error&) {
    // A rejected input is the expected outcome for most inputs.
  }
  return 0;
}
