// The table of cases: one function per kernel family, in the order the families are built
// on one another (element-wise first, layers last).
#include <set>

#include "core/error.h"
#include "test/ops/harness.h"

namespace gridnn::test {

const OpCases& all_op_cases() {
  static const OpCases cases = [] {
    OpCases all;
    for (auto add : {add_elementwise_cases, add_reduce_cases, add_gemm_cases, add_layout_cases,
                     add_random_cases, add_conv3d_cases, add_pool3d_cases, add_batchnorm_cases,
                     add_softmax_cases, add_dropout_cases, add_optim_cases, add_layer_cases})
      add(all);
    std::set<std::string> names;
    for (const OpCase& c : all)
      GRIDNN_REQUIRE(names.insert(c.name()).second, "op harness: two cases are named ", c.name());
    return all;
  }();
  return cases;
}

}  // namespace gridnn::test
