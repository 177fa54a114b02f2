// Byte sizes as people write and read them: --memory-limit, --memory-per-rank and the
// messages and reports of the per-rank memory model.
#pragma once

#include <cstdint>
#include <string>

namespace gridnn {

// "1.50 GiB", "512.0 MiB", "12.0 KiB", "100 B".
std::string format_bytes(int64_t bytes);
// Parses "6GiB", "512MiB", "1.5GB", "2048", "4 KiB" (binary K/M/G/TiB, decimal kB/MB/GB/TB,
// plain bytes); throws gridnn::Error naming the accepted forms for anything else, zero or a
// negative size.
int64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace gridnn
