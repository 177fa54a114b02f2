// Test helpers for the data tests: a fresh temporary folder per test (removed afterwards)
// and a substring assertion for error messages.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test/support/temp_dir.h"

namespace gridnn::test {

// EXPECT_TRUE(contains(message, "is 4-D")) prints the whole message when it fails.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\"\ndoes not contain\n\"" << part << "\"";
}

class ScratchDirTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return temp_.file(name); }
  static void write_text(const std::string& file, const std::string& text) {
    std::ofstream(file, std::ios::binary) << text;
  }

  TempDir temp_{"data"};
  const std::filesystem::path dir_ = temp_.path();
};

}  // namespace gridnn::test
