// Byte sizes as people write and read them (bytes.h).
#include "core/bytes.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace gridnn {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char text[32];
  if (u == 0)
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(text, sizeof text, "%.2f %s", v, units[u]);
  return text;
}

int64_t parse_bytes(const std::string& text, const std::string& what) {
  const std::string forms =
      "; give bytes (4294967296) or a number with a unit: KiB, MiB, GiB, TiB (1024-based) "
      "or kB, MB, GB, TB (1000-based), e.g. 6GiB or 512MiB";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  double value = 0;
  bool ok = !number.empty() && std::count(number.begin(), number.end(), '.') <= 1 && number != ".";
  if (ok) value = std::strtod(number.c_str(), nullptr);
  static const std::pair<const char*, double> units[] = {{"", 1},
                                                         {"B", 1},
                                                         {"KiB", 1024.0},
                                                         {"MiB", 1048576.0},
                                                         {"GiB", 1073741824.0},
                                                         {"TiB", 1099511627776.0},
                                                         {"kB", 1e3},
                                                         {"KB", 1e3},
                                                         {"MB", 1e6},
                                                         {"GB", 1e9},
                                                         {"TB", 1e12},
                                                         {"K", 1024.0},
                                                         {"M", 1048576.0},
                                                         {"G", 1073741824.0},
                                                         {"T", 1099511627776.0}};
  double scale = 0;
  for (const auto& [name, s] : units)
    if (unit == name) scale = s;
  ok = ok && scale > 0;
  const double bytes = std::floor(value * scale);
  GRIDNN_REQUIRE(ok, what, ": cannot read '", text, "' as a size", forms);
  GRIDNN_REQUIRE(bytes >= 1 && bytes < 9.2e18, what, ": ", text, " is not a usable size (it must be at least 1 byte)",
                 forms);
  return int64_t(bytes);
}

}  // namespace gridnn
