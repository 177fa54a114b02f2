#include "core/test_switches.h"

#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace gridnn {

TestSwitches read_test_switches(const std::function<const char*(const char*)>& getenv) {
  TestSwitches s;
  if (const char* v = getenv("GRIDNN_DEVICE_STANDIN")) s.device_standin = std::string(v) == "1";
  if (const char* v = getenv("GRIDNN_MEMORY_PREFLIGHT")) s.memory_preflight = std::string(v) != "off";
  if (const char* v = getenv("GRIDNN_TEST_NODE_OF_RANK"); v && *v) s.node_of_rank = v;
  if (const char* v = getenv("GRIDNN_TEST_NCCL_LOOPBACK")) s.nccl_loopback = std::string(v) == "1";
  if (const char* v = getenv("GRIDNN_TEST_DISK_FULL_AFTER"); v && *v) {
    const long long bytes = std::strtoll(v, nullptr, 10);
    if (bytes >= 0) s.disk_full_after = bytes;
  }
  return s;
}

const TestSwitches& test_switches() {
  static const TestSwitches switches = read_test_switches([](const char* name) { return std::getenv(name); });
  return switches;
}

std::vector<int> TestSwitches::nodes_of_ranks(int ranks) const {
  GRIDNN_REQUIRE(node_of_rank.has_value(), "nodes_of_ranks: GRIDNN_TEST_NODE_OF_RANK is not set");
  const std::string& text = *node_of_rank;
  std::vector<int> nodes(static_cast<size_t>(ranks));
  std::stringstream list(text);
  std::string item;
  size_t i = 0;
  while (std::getline(list, item, ',')) {
    GRIDNN_REQUIRE(i < nodes.size() && !item.empty() && item.find_first_not_of("0123456789") == std::string::npos,
                   "GRIDNN_TEST_NODE_OF_RANK=\"", text, "\": give one node number per rank (", ranks,
                   " comma-separated integers >= 0)");
    nodes[i++] = std::stoi(item);
  }
  GRIDNN_REQUIRE(i == nodes.size(), "GRIDNN_TEST_NODE_OF_RANK=\"", text, "\" has ", i, " entries for ", ranks,
                 " ranks");
  return nodes;
}

}  // namespace gridnn
