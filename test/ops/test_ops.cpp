// The table of the op harness itself (label unit): every op has a double reference, every
// backward is checked, and CTest runs every family (test/ops/CMakeLists.txt, which names
// them in GRIDNN_OP_FAMILIES and those with a backward in GRIDNN_OP_GRAD_FAMILIES). The
// cases run under test-ops (main.cpp): ops_ref_<family>, ops_grad_<family>, ops_backend.
#include <set>
#include <sstream>

#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

std::set<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

TEST(OpTable, EveryOpHasADoubleReferenceAndEveryBackwardIsChecked) {
  std::set<std::string> ops, with_ref;
  for (const OpCase& c : all_op_cases()) {
    ops.insert(c.op);
    if (c.has_reference()) with_ref.insert(c.op);
    EXPECT_EQ(c.has_gradient(), !c.grad_inputs.empty()) << c.name();
  }
  EXPECT_GE(ops.size(), 40u);
  for (const std::string& op : ops) EXPECT_TRUE(with_ref.count(op)) << op << " has no double reference";
}

TEST(OpTable, CTestRunsEveryFamilyInEveryMode) {
  const std::vector<std::string> families = op_families();
  EXPECT_EQ(std::set<std::string>(families.begin(), families.end()), words(GRIDNN_OP_FAMILIES));
  std::set<std::string> with_cases, with_gradients;
  for (const OpCase& c : all_op_cases()) {
    with_cases.insert(c.family);
    if (c.has_gradient()) with_gradients.insert(c.family);
  }
  EXPECT_EQ(with_cases, words(GRIDNN_OP_FAMILIES)) << "a family without cases";
  EXPECT_EQ(with_gradients, words(GRIDNN_OP_GRAD_FAMILIES))
      << "GRIDNN_OP_GRAD_FAMILIES (test/ops/CMakeLists.txt) must name every family with a backward, and no other";
}

}  // namespace
}  // namespace gridnn::test
