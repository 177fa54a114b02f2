#include "test/ops/harness.h"

namespace gridnn::test {

void add_pool3d_cases(OpCases&) {}

}  // namespace gridnn::test
