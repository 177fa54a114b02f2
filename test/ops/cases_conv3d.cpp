#include "test/ops/harness.h"

namespace gridnn::test {

void add_conv3d_cases(OpCases&) {}

}  // namespace gridnn::test
