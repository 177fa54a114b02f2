// --grid auto: every factorization of the job's processes, each estimated from the network's
// own description of its step there (step_plan.h).
#include "models/train/grid_choice.h"

#include <cstdio>

#include "core/error.h"
#include "models/train/step_plan.h"

namespace gridnn::train {

parallel::GridShape choose_grid(const TrainOptions& o, int procs, std::string* why) {
  // One node's shared memory: the model's default latency, 10 GB/s.
  plan::Machine machine;
  machine.beta = 4.0 / 10e9;
  const std::vector<plan::PlanCost> plans = sweep_grids(o, procs, machine);  // the usable grids
  std::string considered;
  const plan::PlanCost* best = nullptr;
  for (const plan::PlanCost& p : plans) {
    considered += (considered.empty() ? "" : ", ") + std::to_string(p.grid.rows) + "x" + std::to_string(p.grid.cols);
    if (!best || p.total_s() < best->total_s()) best = &p;
  }
  GRIDNN_REQUIRE(best, "--grid auto: no grid of ", procs, " processes fits --batch ", o.batch, " and depth ",
                 o.input[0], "; give --grid PrxPc or change the batch");
  char text[320], batch_only[64] = "not usable";
  if (plans.front().grid.rows == 1) std::snprintf(batch_only, sizeof batch_only, "%.3g ms", 1e3 * plans.front().comm_s());
  std::snprintf(text, sizeof text, "%dx%d of %s: predicted communication %.3g ms per step; pure batch (1x%d) %s",
                best->grid.rows, best->grid.cols, considered.c_str(), 1e3 * best->comm_s(), procs, batch_only);
  if (why) *why = text;
  return {1, best->grid.rows, best->grid.cols};
}

}  // namespace gridnn::train
