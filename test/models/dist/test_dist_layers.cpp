// The distributed layers of docs/design.md §4 (models/dist: attention, synchronized batch norm,
// global pooling, 1.5D linear) against their single-process layers, on every grid the job
// size allows: 1 x P (depth / model split over the row), P x 1 as Pc = P (batch split),
// and 2 x 2 at 4 ranks. Every rank computes the single-process reference itself (same
// weights, the full input) and compares its part: output and input-gradient slabs,
// parameter gradients summed over the communicator the trainer would use (relative error
// <= 1e-5), batch-norm running statistics; and the CommLog's element counts of one
// forward + backward against docs/design.md §4's formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "models/dist/attention.h"
#include "models/dist/global_pool.h"
#include "models/dist/linear.h"
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/linear.h"
#include "models/layers/pool3d.h"
#include "models/run/whole_state.h"
#include "parallel/process_grid.h"
#include "test/support/attention_case.h"
#include "test/support/batchnorm_case.h"
#include "test/support/grids.h"
#include "test/support/mpi_main.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using parallel::GridShape;
using parallel::ProcessGrid;
using parallel::Range;
using test::max_relative_error;
using test::random_tensor;

constexpr double kRel = 1e-5;  // fp32 relative error per tensor

std::vector<GridShape> grids() { return test::job_grids(test::world_size()); }

// The part of a full [B, C, D, H, W] (CPU) tensor that grid rank (r, c) holds: samples
// balanced over the columns, depth planes balanced over the rows.
struct Part {
  Range samples, planes;
};
Part part_of(const ProcessGrid& g, int64_t batch, int64_t depth) {
  return {parallel::balanced_range(batch, g.shape().cols, g.col_rank()),
          parallel::balanced_range(depth, g.shape().rows, g.row_rank())};
}

Tensor slab(const Tensor& x, const Part& p) {
  const int64_t c = x.size(1), d = x.size(2), hw = x.size(3) * x.size(4);
  Tensor out = Tensor::empty({p.samples.size(), c, p.planes.size(), x.size(3), x.size(4)});
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (int64_t s = 0; s < p.samples.size(); ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      std::memcpy(dst + ((s * c + ch) * p.planes.size()) * hw,
                  src + (((p.samples.begin + s) * c + ch) * d + p.planes.begin) * hw,
                  size_t(p.planes.size() * hw) * sizeof(float));
  return out;
}

Tensor rows_of(const Tensor& x, Range r) { return x.narrow(r.begin, r.size()).clone(); }

nn::Parameter* find_parameter(nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return nullptr;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : test::to_doubles(t)) m = std::max(m, std::abs(v));
  return m;
}

// Every parameter gradient of `dist_layer`, summed over `comm`, against `ref`'s. A
// gradient that is zero in exact arithmetic (`zero_names`) is only rounding noise in both
// runs: its error is measured against `zero_scale` (a gradient of the same magnitude).
void expect_grads_summed_over(nn::Module& dist_layer, nn::Module& ref, parallel::Communicator& comm,
                              const std::vector<std::string>& zero_names = {}, double zero_scale = 0) {
  for (auto& [name, p] : ref.named_parameters()) {
    SCOPED_TRACE(name);
    Tensor g = find_parameter(dist_layer, name)->grad.clone();
    comm.all_reduce(g);
    if (std::find(zero_names.begin(), zero_names.end(), name) != zero_names.end()) {
      EXPECT_LE(max_abs(g), kRel * zero_scale);
      EXPECT_LE(max_abs(p->grad), kRel * zero_scale);
    } else {
      EXPECT_LE(max_relative_error(g, p->grad), kRel);
    }
  }
}

std::string trace(const GridShape& s) {
  return "grid " + s.str() + " (Pr x Pc), rank " + std::to_string(test::world_rank());
}

// check(grid, part) on every grid of grids(), with B samples and D planes parted over it;
// the first fatal failure ends the test.
template <class Check>
void on_every_grid(int64_t B, int64_t D, Check check) {
  for (const GridShape& shape : grids()) {
    SCOPED_TRACE(trace(shape));
    auto grid = ProcessGrid::create(shape);
    check(grid.get(), part_of(*grid, B, D));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---- SelfAttention3d ---------------------------------------------------------------------

TEST(DistSelfAttention3d, MatchesSingleProcessOnEveryGrid) {
  const int64_t B = 4, C = 16, D = 7, H = 3, W = 3, c8 = C / 8;
  test::AttentionCase c({B, C, D, H, W});
  const Tensor &x = c.x, &dy = c.dy, &y_ref = c.y_ref, &dx_ref = c.dx_ref;
  nn::SelfAttention3d& ref = c.ref;

  on_every_grid(B, D, [&](ProcessGrid* grid, const Part& part) {
    nn::DistSelfAttention3d layer(*grid, C, D);
    c.set_up(layer);
    ASSERT_EQ(layer.named_parameters().size(), ref.named_parameters().size());
    for (auto& [name, p] : ref.named_parameters())
      EXPECT_TRUE(test::tensors_equal(find_parameter(layer, name)->value, p->value)) << name;

    parallel::comm_log().clear();
    const Tensor y = layer.forward(slab(x, part));
    EXPECT_LE(max_relative_error(y, slab(y_ref, part)), kRel);
    const Tensor dx = layer.backward(slab(dy, part));
    EXPECT_LE(max_relative_error(dx, slab(dx_ref, part)), kRel);

    // docs/design.md §4: K and V all-gathered over the row, dK and dV reduce-scattered back. The log
    // counts what a rank puts in: its own B (C/8 + C) N_r for the gather, the whole
    // B (C/8 + C) N of contributions for the reduce-scatter.
    const int64_t b = part.samples.size(), nr = part.planes.size() * H * W, n = D * H * W;
    const auto& log = parallel::comm_log();
    EXPECT_EQ(log.elements("row", "all_gatherv", "SelfAttention3d"), b * (c8 + C) * nr);
    EXPECT_EQ(log.elements("row", "reduce_scatterv", "SelfAttention3d"), b * (c8 + C) * n);
    EXPECT_EQ(log.records().size(), 2u);

    // Replicated parameters, declared by the layer as summed over the stage: the gradients
    // summed so are the 1 x 1 run's.
    for (auto& [name, p] : layer.named_parameters()) EXPECT_EQ(p->layout.grad_sum_over, &grid->stage_comm()) << name;
    // key.bias's is zero (softmax over keys ignores q_i . bk, the same for every key).
    expect_grads_summed_over(layer, ref, grid->stage_comm(), {"key.bias"},
                             max_abs(find_parameter(ref, "key.weight")->grad));
  });
}

TEST(DistSelfAttention3d, RejectsAWrongSlabAndTooManyRows) {
  auto grid = ProcessGrid::create(GridShape{1, test::world_size(), 1});
  nn::DistSelfAttention3d layer(*grid, 8, 5);
  const int64_t planes = layer.planes().size();
  EXPECT_THROW(layer.forward(Tensor::zeros({1, 8, planes + 1, 2, 2})), Error);
  if (test::world_size() > 1) {
    EXPECT_THROW(nn::DistSelfAttention3d(*grid, 8, test::world_size() - 1), Error);
  }
}

// ---- BatchNorm3d -------------------------------------------------------------------------

TEST(SynchronizedBatchNorm3d, StatisticsAndGradientsAreGridInvariant) {
  test::BatchNormCase c;
  const int64_t B = c.B, C = c.C, D = c.D;
  const Tensor &x = c.x, &dy = c.dy, &y_ref = c.y_ref, &dx_ref = c.dx_ref, &y_eval_ref = c.y_eval_ref;
  nn::BatchNorm3d& ref = c.ref;

  on_every_grid(B, D, [&](ProcessGrid* grid, const Part& part) {
    nn::BatchNorm3d bn(C, 1e-5, 0.1, Device::cpu(), &grid->stage_comm());
    c.set_affine(bn);

    parallel::comm_log().clear();
    const Tensor y = bn.forward(slab(x, part));
    EXPECT_LE(max_relative_error(y, slab(y_ref, part)), kRel);
    const Tensor dx = bn.backward(slab(dy, part));
    EXPECT_LE(max_relative_error(dx, slab(dx_ref, part)), kRel);
    // docs/design.md §4: the count (one i64 on the host), sum(x), then the [2, C] second-pass
    // sums forward; [2, C] backward: four all-reduces.
    EXPECT_EQ(parallel::comm_log().elements("stage", "all_reduce", "BatchNorm3d"), 1 + C + 2 * 2 * C);
    EXPECT_EQ(parallel::comm_log().elements("", "", ""), 1 + C + 2 * 2 * C);
    EXPECT_EQ(parallel::comm_log().records().size(), 4u);

    EXPECT_LE(max_relative_error(bn.running_mean(), ref.running_mean()), kRel);
    EXPECT_LE(max_relative_error(bn.running_var(), ref.running_var()), kRel);
    EXPECT_TRUE(test::tensors_equal(bn.num_batches_tracked(), ref.num_batches_tracked()));
    for (auto& [name, p] : bn.named_parameters()) EXPECT_EQ(p->layout.grad_sum_over, &grid->stage_comm()) << name;
    expect_grads_summed_over(bn, ref, grid->stage_comm());

    bn.eval();  // running statistics: no communication
    parallel::comm_log().clear();
    EXPECT_LE(max_relative_error(bn.forward(slab(x, part)), slab(y_eval_ref, part)), kRel);
    EXPECT_EQ(parallel::comm_log().records().size(), 0u);
  });
}

// ---- GlobalAvgPool3d ---------------------------------------------------------------------

TEST(DistGlobalAvgPool3d, ReplicatedFeaturesAndSlabGradients) {
  const int64_t B = 4, C = 5, D = 7, H = 2, W = 3;
  const Tensor x = random_tensor({B, C, D, H, W}, 21);
  const Tensor dy = random_tensor({B, C}, 22);
  nn::GlobalAvgPool3d ref;
  const Tensor y_ref = ref.forward(x);
  const Tensor dx_ref = ref.backward(dy);

  on_every_grid(B, D, [&](ProcessGrid* grid, const Part& part) {
    nn::DistGlobalAvgPool3d pool(grid->row(), D * H * W);
    parallel::comm_log().clear();
    const Tensor y = pool.forward(slab(x, part));
    EXPECT_LE(max_relative_error(y, rows_of(y_ref, part.samples)), kRel);
    const Tensor dx = pool.backward(rows_of(dy, part.samples));
    EXPECT_LE(max_relative_error(dx, slab(dx_ref, part)), kRel);
    // docs/design.md §4: the B_c x C partial sums all-reduced over the row; nothing backward.
    EXPECT_EQ(parallel::comm_log().elements("row", "all_reduce", "GlobalAvgPool3d"), part.samples.size() * C);
    EXPECT_EQ(parallel::comm_log().records().size(), 1u);
  });
}

// ---- Linear (1.5D) -----------------------------------------------------------------------

TEST(DistLinear, RowBlocksMatchSingleProcessOnEveryGrid) {
  const int64_t B = 4, in = 12, out = 10;  // 10 rows over 4 ranks: 3, 3, 2, 2
  const Tensor x = random_tensor({B, in}, 31);
  const Tensor dy = random_tensor({B, out}, 32);
  nn::Linear ref(in, out);
  ref.initialize(5);
  const Tensor y_ref = ref.forward(x);
  const Tensor dx_ref = ref.backward(dy);

  for (const GridShape& shape : grids()) {
    SCOPED_TRACE(trace(shape));
    auto grid = ProcessGrid::create(shape);
    const Range samples = parallel::balanced_range(B, shape.cols, grid->col_rank());
    nn::DistLinear fc(*grid, in, out);
    fc.initialize(5);  // each block drawn from its global indices
    const Range block = fc.block();
    EXPECT_EQ(block.size(), parallel::balanced_range(out, shape.rows, grid->row_rank()).size());
    EXPECT_TRUE(
        test::tensors_equal(find_parameter(fc, "weight")->value, rows_of(find_parameter(ref, "weight")->value, block)));

    parallel::comm_log().clear();
    const Tensor y = fc.forward(rows_of(x, samples));
    EXPECT_LE(max_relative_error(y, rows_of(y_ref, samples)), kRel);
    const Tensor dx = fc.backward(rows_of(dy, samples));
    EXPECT_LE(max_relative_error(dx, rows_of(dx_ref, samples)), kRel);
    // docs/design.md §4: Y blocks all-gathered (B_c * out_r sent), dX all-reduced (B_c * in).
    const auto& log = parallel::comm_log();
    EXPECT_EQ(log.elements("row", "all_gatherv", "Linear"), samples.size() * block.size());
    EXPECT_EQ(log.elements("row", "all_reduce", "Linear"), samples.size() * in);
    EXPECT_EQ(log.records().size(), 2u);

    // The layer declares its row blocks and their gradients' sum over col.
    for (auto& [name, p] : fc.named_parameters()) {
      EXPECT_EQ(p->layout.split_over, &grid->row()) << name;
      EXPECT_EQ(p->layout.split_dim, 0) << name;
      EXPECT_EQ(p->layout.whole, out) << name;
      EXPECT_EQ(p->layout.first, block.begin) << name;
      EXPECT_EQ(p->layout.grad_sum_over, &grid->col()) << name;
    }
    // dW_r, db_r: summed over col_comm (the batch shards), stacked over the row.
    NamedTensors grads = run::whole_gradients(fc);
    ASSERT_EQ(grads.size(), 2u);
    for (auto& [name, g] : grads) {
      SCOPED_TRACE(name);
      grid->col().all_reduce(g);
      EXPECT_LE(max_relative_error(g, find_parameter(ref, name)->grad), kRel);
    }

    // Checkpoints: the full tensors gathered, and a fresh layer loaded from them.
    std::map<std::string, Tensor> full;
    for (auto& [name, t] : run::whole_model_tensors(fc)) {
      EXPECT_TRUE(test::tensors_equal(t, find_parameter(ref, name)->value)) << name;
      full[name] = t;
    }
    nn::DistLinear loaded(*grid, in, out);
    run::load_model_tensors(loaded, full, "the gathered tensors");
    EXPECT_TRUE(test::tensors_equal(loaded.forward(rows_of(x, samples)), y));
    full.erase("bias");
    EXPECT_THROW(run::load_model_tensors(loaded, full, "the gathered tensors"), Error);
  }
}

}  // namespace
}  // namespace gridnn
