// The test switches (core/test_switches.h) read from a given environment: unset, set, and the
// node list checked against the job's size.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "core/test_switches.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

TestSwitches read(const std::map<std::string, std::string>& env) {
  return read_test_switches([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(TestSwitches, UnsetMeansTheProductionBehaviour) {
  const TestSwitches s = read({});
  EXPECT_FALSE(s.device_standin);
  EXPECT_TRUE(s.memory_preflight);
  EXPECT_FALSE(s.node_of_rank.has_value());
  EXPECT_FALSE(s.disk_full_after.has_value());
  EXPECT_FALSE(s.nccl_loopback);
}

TEST(TestSwitches, EachReadsItsVariable) {
  const TestSwitches s = read({{"GRIDNN_DEVICE_STANDIN", "1"},
                               {"GRIDNN_MEMORY_PREFLIGHT", "off"},
                               {"GRIDNN_TEST_NODE_OF_RANK", "0,0,1,1"},
                               {"GRIDNN_TEST_DISK_FULL_AFTER", "16384"},
                               {"GRIDNN_TEST_NCCL_LOOPBACK", "1"}});
  EXPECT_TRUE(s.device_standin);
  EXPECT_TRUE(s.nccl_loopback);
  EXPECT_FALSE(s.memory_preflight);
  EXPECT_EQ(s.node_of_rank, "0,0,1,1");
  EXPECT_EQ(s.disk_full_after, 16384);
  EXPECT_EQ(s.nodes_of_ranks(4), (std::vector<int>{0, 0, 1, 1}));
}

TEST(TestSwitches, OtherValuesLeaveThemOff) {
  const TestSwitches s = read({{"GRIDNN_DEVICE_STANDIN", "0"},
                               {"GRIDNN_MEMORY_PREFLIGHT", "on"},
                               {"GRIDNN_TEST_NODE_OF_RANK", ""},
                               {"GRIDNN_TEST_DISK_FULL_AFTER", "-1"},
                               {"GRIDNN_TEST_NCCL_LOOPBACK", "yes"}});
  EXPECT_FALSE(s.device_standin);
  EXPECT_FALSE(s.nccl_loopback);
  EXPECT_TRUE(s.memory_preflight);
  EXPECT_FALSE(s.node_of_rank.has_value());
  EXPECT_FALSE(s.disk_full_after.has_value());
}

TEST(TestSwitches, TheNodeListNeedsOneNumberPerRank) {
  const TestSwitches s = read({{"GRIDNN_TEST_NODE_OF_RANK", "0,0,1"}});
  std::string what = test::error_message([&] { s.nodes_of_ranks(4); });
  EXPECT_NE(what.find("has 3 entries for 4 ranks"), std::string::npos) << what;
  what = test::error_message([&] { s.nodes_of_ranks(2); });
  EXPECT_NE(what.find("give one node number per rank (2 comma-separated integers >= 0)"), std::string::npos) << what;
  const TestSwitches bad = read({{"GRIDNN_TEST_NODE_OF_RANK", "0,x"}});
  what = test::error_message([&] { bad.nodes_of_ranks(2); });
  EXPECT_NE(what.find("GRIDNN_TEST_NODE_OF_RANK=\"0,x\""), std::string::npos) << what;
}

}  // namespace
}  // namespace gridnn
