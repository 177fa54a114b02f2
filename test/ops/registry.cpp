// The table of cases: one function per family, in the order the families are built on one
// another (element-wise first, layers last). A family's name is that of its file,
// cases_<family>.cpp, and test/ops/CMakeLists.txt registers one CTest test per family and mode.
#include <set>

#include "core/error.h"
#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

struct Family {
  const char* name;
  void (*add)(OpCases&);
};

constexpr Family kFamilies[] = {
    {"elementwise", add_elementwise_cases}, {"reduce", add_reduce_cases},       {"gemm", add_gemm_cases},
    {"layout", add_layout_cases},           {"random", add_random_cases},       {"conv3d", add_conv3d_cases},
    {"pool3d", add_pool3d_cases},           {"batchnorm", add_batchnorm_cases}, {"softmax", add_softmax_cases},
    {"dropout", add_dropout_cases},         {"optim", add_optim_cases},         {"layer", add_layer_cases}};

}  // namespace

std::vector<std::string> op_families() {
  std::vector<std::string> names;
  for (const Family& f : kFamilies) names.push_back(f.name);
  return names;
}

const OpCases& all_op_cases() {
  static const OpCases cases = [] {
    OpCases all;
    for (const Family& f : kFamilies) {
      const size_t first = all.size();
      f.add(all);
      for (size_t i = first; i < all.size(); ++i) all[i].family = f.name;
    }
    std::set<std::string> names;
    for (const OpCase& c : all)
      GRIDNN_REQUIRE(names.insert(c.name()).second, "op harness: two cases are named ", c.name());
    return all;
  }();
  return cases;
}

}  // namespace gridnn::test
