// The grids a distributed test runs on for a job of `p` processes: 1 x P (the row splits),
// P x 1 written as Pc = P (the batch splits), and 2 x 2 at P = 4.
#pragma once

#include <vector>

#include "parallel/process_grid.h"

namespace gridnn::test {

inline std::vector<parallel::GridShape> job_grids(int p) {
  std::vector<parallel::GridShape> out{parallel::GridShape{1, p, 1}};
  if (p > 1) out.push_back(parallel::GridShape{1, 1, p});
  if (p == 4) out.push_back(parallel::GridShape{1, 2, 2});
  return out;
}

}  // namespace gridnn::test
