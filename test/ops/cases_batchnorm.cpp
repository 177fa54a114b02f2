#include "test/ops/harness.h"

namespace gridnn::test {

void add_batchnorm_cases(OpCases&) {}

}  // namespace gridnn::test
