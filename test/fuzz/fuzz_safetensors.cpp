// libFuzzer target for the safetensors reader: any input must either parse or raise
// gridnn::Error, never crash, hang, leak or trip a sanitizer. See test/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    gridnn::SafetensorsFile file = gridnn::parse_safetensors(data, size, "fuzz input");
    // Touch every tensor's bytes so a bad range would show up under AddressSanitizer.
    for (const auto& [name, tensor] : file.tensors) {
      const auto* bytes = static_cast<const uint8_t*>(tensor.raw());
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < tensor.nbytes(); ++i) sink = sink ^ bytes[i];
      (void)sink;
      (void)name;
    }
  } catch (const gridnn::Error&) {
    // A rejected file is the expected outcome for most inputs.
  }
  return 0;
}
