// The op harness's backend mode under CTest (label gpu): every case on cuda:0 against the
// CPU backend, one test per case (OpBackend/<op>_<params>); skipped without a CUDA device.
#include "test/ops/harness.h"
#include "test/support/gpu_test.h"

namespace gridnn::test {
namespace {

class OpBackend : public GpuTest, public ::testing::WithParamInterface<const OpCase*> {};
TEST_P(OpBackend, CudaMatchesCpu) { EXPECT_TRUE(check_backend(*GetParam(), gpu())); }

std::vector<const OpCase*> every_case() {
  std::vector<const OpCase*> out;
  for (const OpCase& c : all_op_cases()) out.push_back(&c);
  return out;
}
std::string case_name(const ::testing::TestParamInfo<const OpCase*>& param) { return param.param->name(); }
INSTANTIATE_TEST_SUITE_P(Ops, OpBackend, ::testing::ValuesIn(every_case()), case_name);

}  // namespace
}  // namespace gridnn::test
