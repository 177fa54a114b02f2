// --grid auto through the cost model's sweep.
#include "models/train/grid_choice.h"

#include <cstdio>

#include "core/error.h"
#include "plan/cost_model.h"

namespace gridnn::train {

parallel::GridShape choose_grid(const TrainOptions& o, int procs, std::string* why) {
  plan::Network net;
  if (o.model == "resattnet3d") {
    plan::ResAttNetShape s;
    s.depth = o.resattnet.depth;
    s.width = o.resattnet.width;
    s.in_channels = o.in_channels;
    s.classes = o.classes;
    s.input = {o.input[0], o.input[1], o.input[2]};
    s.attention3 = o.resattnet.attention3;
    s.attention4 = o.resattnet.attention4;
    net = plan::resattnet3d(s);
  } else {
    std::vector<int64_t> sizes{o.in_channels * o.input[0] * o.input[1] * o.input[2]};
    sizes.insert(sizes.end(), o.mlp_hidden.begin(), o.mlp_hidden.end());
    sizes.push_back(o.classes);
    net = plan::mlp(sizes);
  }
  // One node's shared memory: the model's default latency, 10 GB/s.
  plan::Machine machine;
  machine.beta = 4.0 / 10e9;
  const std::vector<plan::PlanCost> plans = plan::sweep(net, o.batch, procs, machine, plan::model_batch_domain());
  const plan::PlanCost* best = nullptr;
  std::string considered;
  for (const plan::PlanCost& p : plans) {
    if (p.grid.cols > o.batch || p.grid.rows > o.input[0]) continue;  // a shard or slab would be empty
    considered += (considered.empty() ? "" : ", ") + std::to_string(p.grid.rows) + "x" + std::to_string(p.grid.cols);
    if (!best || p.total_s() < best->total_s()) best = &p;
  }
  GRIDNN_REQUIRE(best, "--grid auto: no grid of ", procs, " processes fits --batch ", o.batch, " and depth ",
                 o.input[0], "; give --grid PrxPc or change the batch");
  const double batch_comm = plans.front().comm_s();  // 1 x P
  char text[256];
  std::snprintf(text, sizeof text,
                "%dx%d of %s: predicted communication %.3g ms per step; pure batch (1x%d) %.3g ms",
                best->grid.rows, best->grid.cols, considered.c_str(), 1e3 * best->comm_s(), procs,
                1e3 * batch_comm);
  if (why) *why = text;
  return {1, best->grid.rows, best->grid.cols};
}

}  // namespace gridnn::train
