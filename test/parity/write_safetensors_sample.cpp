// Writes the interop sample (test/parity/safetensors_sample.h) to the file named on the
// command line, for check_torch_load.py to load with PyTorch (test safetensors_loads_in_torch).
#include <iostream>

#include "core/safetensors.h"
#include "test/parity/safetensors_sample.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " OUTPUT.safetensors\n";
    return 2;
  }
  try {
    gridnn::save_safetensors(argv[1], gridnn::parity::make_sample(), gridnn::parity::sample_metadata());
  } catch (const gridnn::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cout << "wrote " << argv[1] << "\n";
  return 0;
}
