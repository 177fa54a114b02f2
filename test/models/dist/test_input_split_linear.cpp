// InputSplitLinear (models/dist/input_split_linear.h) against the single-process Linear on
// every grid the job allows: 1 x P (input features split over the row), P x 1 as Pc = P
// (batch split) and 2 x 2 at 4 ranks. Each rank checks its output and input gradient, its
// weight block (drawn as the whole layer's columns), the gradients summed over the batch
// shards and gathered whole, the communication counted against the layer's own description,
// and a round trip of the whole tensors.
#include <gtest/gtest.h>

#include <map>

#include "kernels/layout.h"
#include "models/dist/input_split_linear.h"
#include "models/run/whole_state.h"
#include "plan/cost_model.h"
#include "test/support/grids.h"
#include "test/support/mpi_main.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using parallel::GridShape;
using parallel::Range;
using test::max_relative_error;

std::vector<GridShape> grids() { return test::job_grids(test::world_size()); }

Tensor rows_of(const Tensor& x, Range r) { return x.narrow(r.begin, r.size()).clone(); }
Tensor columns_of(const Tensor& w, Range c) { return ops::slice(w, 1, c.begin, c.size()); }

TEST(InputSplitLinear, ColumnBlocksMatchSingleProcessOnEveryGrid) {
  const int64_t B = 4, in = 10, out = 6;  // 10 features over 4 ranks: 3, 3, 2, 2
  const Tensor x = test::random_tensor({B, in}, 41), dy = test::random_tensor({B, out}, 42);
  nn::Linear ref(in, out);
  ref.initialize(9);
  const Tensor y_ref = ref.forward(x), dx_ref = ref.backward(dy);

  for (const GridShape& shape : grids()) {
    SCOPED_TRACE("grid " + shape.str() + ", rank " + std::to_string(test::world_rank()));
    auto grid = parallel::ProcessGrid::create(shape);
    const Range samples = parallel::balanced_range(B, shape.cols, grid->col_rank());
    nn::InputSplitLinear fc(*grid, in, out);
    fc.initialize(9);
    std::map<std::string, nn::Parameter*> params;
    for (auto& [name, p] : fc.named_parameters()) params[name] = p;
    ASSERT_EQ(params.size(), 2u);
    EXPECT_TRUE(test::tensors_equal(params.at("weight")->value, columns_of(ref.weight().value, fc.block())));
    EXPECT_TRUE(test::tensors_equal(params.at("bias")->value, ref.bias()->value));

    parallel::comm_log().clear();
    const Tensor y = fc.forward(rows_of(x, samples));
    EXPECT_LE(max_relative_error(y, rows_of(y_ref, samples)), 1e-5);
    const Tensor dx = fc.backward(rows_of(dy, samples));
    EXPECT_LE(max_relative_error(dx, rows_of(dx_ref, samples)), 1e-5);
    // What was counted is what the layer describes.
    plan::RankStep step;
    fc.describe(Shape{samples.size(), in}, step);
    std::map<plan::CommKey, int64_t> counted;
    for (const parallel::CommRecord& r : parallel::comm_log().records()) counted[{r.layer, r.comm, r.op}] += r.elements;
    EXPECT_EQ(counted, plan::comm_elements(step.calls));
    EXPECT_EQ(counted.at({"Linear", "row", "all_reduce"}), samples.size() * out);
    EXPECT_EQ(counted.at({"Linear", "row", "all_gatherv"}), samples.size() * fc.block().size());

    // Gradients summed over the batch shards (the layout's grad_sum_over), whole.
    for (auto& [name, p] : params) EXPECT_EQ(p->layout.grad_sum_over, &grid->col()) << name;
    for (auto& [name, p] : params) grid->col().all_reduce(p->grad);
    for (auto& [name, g] : run::whole_gradients(fc)) {
      const Tensor& want = name == "weight" ? ref.weight().grad : ref.bias()->grad;
      EXPECT_LE(max_relative_error(g, want), 1e-5) << name;
    }
    // Whole tensors out, and into a fresh layer.
    std::map<std::string, Tensor> whole;
    for (auto& [name, t] : run::whole_model_tensors(fc)) whole[name] = t;
    EXPECT_TRUE(test::tensors_equal(whole.at("weight"), ref.weight().value));
    nn::InputSplitLinear loaded(*grid, in, out);
    run::load_model_tensors(loaded, whole, "the gathered tensors");
    EXPECT_TRUE(test::tensors_equal(loaded.forward(rows_of(x, samples)), y));
  }
}

TEST(InputSplitLinear, NeedsAFeaturePerRowRank) {
  auto grid = parallel::ProcessGrid::create(GridShape{1, test::world_size(), 1});
  if (test::world_size() > 1) {
    EXPECT_THROW(nn::InputSplitLinear(*grid, test::world_size() - 1, 3), Error);
  }
}

}  // namespace
}  // namespace gridnn
