// The PyTorch parity fixtures (test/parity/make_*_fixtures.py writes them to
// test/parity/fixtures/, which every test sees as GRIDNN_TEST_DATA_DIR): a file read once
// per process, and its tensors by name.
//
//   Tensor w = test::parity_fixture("layers.safetensors", "conv.weight");
#pragma once

#include <map>
#include <string>

#include "core/error.h"
#include "core/safetensors.h"

namespace gridnn::test {

// test/parity/fixtures/<file_name>, read on first use.
inline const SafetensorsFile& parity_fixtures(const std::string& file_name) {
  static std::map<std::string, SafetensorsFile> files;
  auto it = files.find(file_name);
  if (it == files.end())
    it = files.emplace(file_name, load_safetensors(std::string(GRIDNN_TEST_DATA_DIR) + "/" + file_name)).first;
  return it->second;
}

// Its tensor `name`; throws an Error naming the file and the tensor when it has none.
inline Tensor parity_fixture(const std::string& file_name, const std::string& name) {
  const SafetensorsFile& f = parity_fixtures(file_name);
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) throw Error(file_name + " has no tensor " + name);
  return it->second;
}

}  // namespace gridnn::test
