// Byte sizes (core/bytes.h): parsed from what people write, formatted for messages.
#include <gtest/gtest.h>

#include <string>

#include "core/bytes.h"
#include "core/error.h"

namespace gridnn {
namespace {

TEST(Bytes, ParsesSizes) {
  EXPECT_EQ(parse_bytes("6GiB", "--memory-limit"), int64_t(6) << 30);
  EXPECT_EQ(parse_bytes("512MiB", "--memory-limit"), int64_t(512) << 20);
  EXPECT_EQ(parse_bytes("1.5GB", "--memory-limit"), int64_t(1500000000));
  EXPECT_EQ(parse_bytes("4096", "--memory-limit"), 4096);
  EXPECT_EQ(parse_bytes("4 KiB", "--memory-limit"), 4096);
  for (const char* bad : {"6GB?", "-1", "0", "", "GiB", "1.2.3MiB", "0.1"}) {
    try {
      parse_bytes(bad, "--memory-limit");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("KiB, MiB, GiB"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
    }
  }
}

TEST(Bytes, FormatsBytes) {
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(int64_t(3) << 29), "1.50 GiB");
}

}  // namespace
}  // namespace gridnn
