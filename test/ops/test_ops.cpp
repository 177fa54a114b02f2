// The op harness's ref and grad modes under CTest (label unit): one test per case and mode,
// named OpRef/<op>_<params> and OpGrad/<op>_<params>.
#include <set>

#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

std::vector<const OpCase*> cases_where(bool (OpCase::*has)() const) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : all_op_cases())
    if ((c.*has)()) out.push_back(&c);
  return out;
}
std::string case_name(const ::testing::TestParamInfo<const OpCase*>& param) { return param.param->name(); }

class OpRef : public ::testing::TestWithParam<const OpCase*> {};
TEST_P(OpRef, MatchesDoubleReference) { EXPECT_TRUE(check_reference(*GetParam())); }
INSTANTIATE_TEST_SUITE_P(Ops, OpRef, ::testing::ValuesIn(cases_where(&OpCase::has_reference)), case_name);

class OpGrad : public ::testing::TestWithParam<const OpCase*> {};
TEST_P(OpGrad, MatchesCentralDifferences) { EXPECT_TRUE(check_gradients(*GetParam())); }
INSTANTIATE_TEST_SUITE_P(Ops, OpGrad, ::testing::ValuesIn(cases_where(&OpCase::has_gradient)), case_name);

// The table itself: every family registered something, and the modes cover every op.
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

}  // namespace
}  // namespace gridnn::test
