// The grid's device paths (docs/design.md §4) with every rank on one GPU (labels mpi and gpu;
// run under mpiexec -n 2). The ranks share cuda:0, so the communicators are MPI ones that
// stage device tensors through pinned host buffers (parallel/pinned_staging.h); under the test
// switch GRIDNN_TEST_NCCL_LOOPBACK=1 (test_gpu_grid_nccl_loopback_np2) NCCL ones, each rank a
// host of its own over loopback sockets, where the same expectations hold: two ranks' NCCL
// sums are a + b in one order or the other, the same bits as MPI's rank order. Each test
// runs on device tensors what the CPU tests (test_domain, test_dist_layers, test_dist_train)
// check on host tensors, and compares it with the same computation on the host or with the
// single-process run:
//   - every collective, the halo exchange (extend, return_gradient), the depth gather and its
//     pairs (own block, reduce-scatter): bitwise equal to the host run, because they move
//     data and the MPI backend adds in rank order on the host either way;
//   - synchronized batch norm against the single-process layer on the CPU: relative error
//     <= 1e-5 per tensor (both sides accumulate in double, kernels/batchnorm.h);
//   - domain-parallel convolution against Conv3d on the CPU: <= 1e-4 (cuDNN sums in its own
//     order: test/ops' conv tolerance); max pooling: <= 1e-5;
//   - distributed attention against SelfAttention3d on the CPU: y and dx <= 1e-4, parameter
//     gradients <= 1e-3 (test/ops' attention tolerances);
//   - one training step of the small ResAttNet3D of test_dist_train on every grid of the job
//     against the 1x1 step on the GPU, measured as test/support/grid_invariance.h measures
//     (kStepTolerance below says why 1e-3), and bitwise equal to a second run on its grid;
//   - a step through one pipeline stage per rank in two micro-batches against 1x1 (the
//     stages' sends and receives on the device);
//   - two communicators issued in opposite orders on the two ranks complete (§4's rule);
//   - a training step moves its batch shard to the device and nothing else: no download.
// "Relative error" is test::max_relative_error: max |a - b| / max |b| over the tensor.
// Every test skips, on every rank alike, when some rank sees no CUDA device (a build
// without CUDA, or no GPU), so no rank waits in a collective the others never join; an
// exception on a rank ends the job at once (ending_the_job_on_error) for the same reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/test_switches.h"
#include "core/transfers.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "models/data/synthetic.h"
#include "models/dist/attention.h"
#include "models/dist/domain_parallel.h"
#include "models/dist/replicated.h"
#include "models/layers/attention.h"
#include "models/layers/batchnorm3d.h"
#include "models/layers/conv3d.h"
#include "models/layers/pool3d.h"
#include "models/optim/schedule.h"
#include "models/run/grid_batch.h"
#include "models/run/pipelined_model.h"
#include "parallel/halo.h"
#include "parallel/mappings.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"
#include "parallel/progress_board.h"
#include "test/support/attention_case.h"
#include "test/support/batchnorm_case.h"
#include "test/support/error_message.h"
#include "test/support/gpu_test.h"
#include "test/support/grid_invariance.h"
#include "test/support/grids.h"
#include "test/support/mpi_main.h"
#include "test/support/random_tensor.h"
#include "test/support/tensor_compare.h"

namespace gridnn {
namespace {

using parallel::CommBackend;
using parallel::GridShape;
using parallel::ProcessGrid;
using parallel::Range;
using test::gpu;
using test::max_relative_error;
using test::on_gpu;
using test::random_tensor;
using test::tensors_equal;

// Whether every rank of the job sees a CUDA device: one answer on all ranks (an all-reduce),
// so that they skip together.
bool every_rank_has_a_device() {
  static const bool answer = [] {
    int missing = cuda_device_count() == 0 ? 1 : 0, anywhere = 0;
    GRIDNN_CHECK_MPI(MPI_Allreduce(&missing, &anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return anywhere == 0;
  }();
  return answer;
}

// Runs a test's body. An exception on one rank (a CUDA, MPI or gridnn error) would leave the
// other ranks waiting in a collective until the test's timeout; it ends the job at once
// instead, with the rank, the test and the error (MpiSession::fail_job). Failed expectations
// do not end the job: every rank goes on through the same collectives.
template <class Body>
void ending_the_job_on_error(const Body& body) {
  try {
    body();
  } catch (const std::exception& e) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    MpiSession::fail_job(std::string(info ? info->name() : "?") + ": " + e.what());
  }
}

class GpuGrid : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!every_rank_has_a_device())
      GTEST_SKIP() << "no CUDA device on some rank: "
                   << (built_with_cuda() ? "the CUDA runtime reports none (no GPU, or no usable driver)"
                                         : "gridnn was built without CUDA (-DGRIDNN_CUDA=OFF)");
    ending_the_job_on_error([] { synchronize(gpu()); });  // the device context, created once
    // A hang ends the job naming the collective well inside ctest's 180 s limit.
    parallel::set_comm_timeout(60);
  }
};

// The grid of `shape` on cuda:0 with the backend ranks sharing a GPU get: MPI, or NCCL under
// the loopback switch (TheBackendOfRanksSharingTheGpu).
std::unique_ptr<ProcessGrid> gpu_grid(const GridShape& shape) {
  return ProcessGrid::create(shape, CommBackend::automatic, gpu());
}
std::unique_ptr<ProcessGrid> row_grid() { return gpu_grid(GridShape{1, test::world_size(), 1}); }

std::string where(const GridShape& s) {
  return "grid " + s.str() + " (Pr x Pc), rank " + std::to_string(test::world_rank());
}

// Rows `samples` and depth planes `planes` of a host [B, C, D, H, W] tensor (a copy).
Tensor slab(const Tensor& x, Range samples, Range planes) {
  return ops::slice(x.narrow(samples.begin, samples.size()), 2, planes.begin, planes.size());
}
Tensor planes_of(const Tensor& x, Range planes) { return slab(x, {0, x.size(0)}, planes); }

// `got` (any device) bitwise equal to the host tensor `want`, and on `device`.
void expect_bitwise(const Tensor& got, const Tensor& want, const Device& device, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(got.device(), device) << what;
  EXPECT_TRUE(tensors_equal(got.to_host(), want)) << what;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : test::to_doubles(t)) m = std::max(m, std::fabs(v));
  return m;
}

nn::Parameter* find_parameter(nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return nullptr;
}

// `layer`'s forward and backward on the device slabs (samples, planes) of x and dy: both on
// the device, and within `tol` of those slabs of the one-process y_ref and dx_ref.
void expect_device_slab_pass(nn::Module& layer, const Tensor& x, const Tensor& dy, const Tensor& y_ref,
                             const Tensor& dx_ref, Range samples, Range planes, double tol) {
  const Tensor y = layer.forward(on_gpu(slab(x, samples, planes)));
  EXPECT_EQ(y.device(), gpu());
  EXPECT_LE(max_relative_error(y, slab(y_ref, samples, planes)), tol) << "y";
  const Tensor dx = layer.backward(on_gpu(slab(dy, samples, planes)));
  EXPECT_EQ(dx.device(), gpu());
  EXPECT_LE(max_relative_error(dx, slab(dx_ref, samples, planes)), tol) << "dx";
}

// ---- the backend ---------------------------------------------------------------------------

// NCCL refuses two ranks on one GPU: the automatic choice must fall back to MPI with pinned
// staging (parallel/process_grid.h); under GRIDNN_TEST_NCCL_LOOPBACK=1 it is NCCL over
// loopback, and on the device stand-in the switch is refused, naming why. A device
// all-reduce on the grid must add up.
TEST_F(GpuGrid, TheBackendOfRanksSharingTheGpu) {
  const int p = test::world_size();
  const bool loopback = test_switches().nccl_loopback && p > 1;
  if (loopback && gpu().is_standin()) {
    const std::string m = test::error_message([&] {
      ProcessGrid::create(GridShape{1, p, 1}, CommBackend::automatic, gpu());
    });
    EXPECT_NE(m.find("GRIDNN_TEST_NCCL_LOOPBACK=1 runs NCCL between ranks on a real GPU only"), std::string::npos) << m;
    return;
  }
  ending_the_job_on_error([&] {
    auto grid = ProcessGrid::create(GridShape{1, p, 1}, CommBackend::automatic, gpu());
    if (p > 1) {
      EXPECT_EQ(grid->backend(), loopback ? CommBackend::nccl : CommBackend::mpi);
    }
    Tensor t = on_gpu(Tensor::from_vector(std::vector<float>{float(test::world_rank() + 1), 0.5f}, {2}));
    grid->world().all_reduce(t);
    EXPECT_EQ(t.device(), gpu());
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(p * (p + 1) / 2), 0.5f * float(p)}));
  });
}

// Every call of the Communicator interface on device tensors against the same call on host
// tensors: bitwise (the MPI backend moves and adds the same bytes; only the staging differs).
TEST_F(GpuGrid, CollectivesOnDeviceTensorsEqualTheHostOnes) {
  ending_the_job_on_error([&] {
    auto grid = row_grid();
    parallel::Communicator& comm = grid->world();
    const int p = comm.size(), r = comm.rank();
    const uint64_t seed = 100 + uint64_t(r);

    for (parallel::ReduceOp op : {parallel::ReduceOp::sum, parallel::ReduceOp::max}) {
      SCOPED_TRACE(op == parallel::ReduceOp::sum ? "sum" : "max");
      Tensor host = random_tensor({3, 37}, seed);
      Tensor dev = on_gpu(host);
      comm.all_reduce(host, op);
      comm.all_reduce(dev, op);
      expect_bitwise(dev, host, gpu(), "all_reduce");
    }
    {
      Tensor host = random_tensor({5, 3}, seed, -100, 100, DType::i64);
      Tensor dev = on_gpu(host);
      comm.all_reduce(host);
      comm.all_reduce(dev);
      expect_bitwise(dev, host, gpu(), "all_reduce i64");
    }
    {
      const Tensor in = random_tensor({2, 7}, seed);
      Tensor host = Tensor::empty({2 * p, 7}), dev = Tensor::empty({2 * p, 7}, DType::f32, gpu());
      comm.all_gather(in, host);
      comm.all_gather(on_gpu(in), dev);
      expect_bitwise(dev, host, gpu(), "all_gather");
    }
    std::vector<int64_t> rows;  // uneven: rank i has i + 1 rows
    for (int i = 0; i < p; ++i) rows.push_back(i + 1);
    const int64_t total = p * (p + 1) / 2;
    {
      const Tensor in = random_tensor({r + 1, 3, 4}, seed);
      Tensor host = Tensor::empty({total, 3, 4}), dev = Tensor::empty({total, 3, 4}, DType::f32, gpu());
      comm.all_gatherv(in, host, rows);
      comm.all_gatherv(on_gpu(in), dev, rows);
      expect_bitwise(dev, host, gpu(), "all_gatherv");
    }
    {
      const Tensor in = random_tensor({2 * p, 5}, seed);
      Tensor host = Tensor::empty({2, 5}), dev = Tensor::empty({2, 5}, DType::f32, gpu());
      comm.reduce_scatter(in, host);
      comm.reduce_scatter(on_gpu(in), dev);
      expect_bitwise(dev, host, gpu(), "reduce_scatter");
    }
    {
      const Tensor in = random_tensor({total, 6}, seed);
      Tensor host = Tensor::empty({r + 1, 6}), dev = Tensor::empty({r + 1, 6}, DType::f32, gpu());
      comm.reduce_scatterv(in, host, rows);
      comm.reduce_scatterv(on_gpu(in), dev, rows);
      expect_bitwise(dev, host, gpu(), "reduce_scatterv");
    }
    {
      Tensor host = random_tensor({4, 9}, seed);
      Tensor dev = on_gpu(host);
      comm.broadcast(host, p - 1);
      comm.broadcast(dev, p - 1);
      expect_bitwise(dev, host, gpu(), "broadcast");
    }
    {  // a ring: send to r + 1, receive from r - 1
      const Tensor out = random_tensor({3, 11}, seed);
      const int dest = (r + 1) % p, source = (r - 1 + p) % p;
      Tensor host = Tensor::empty({3, 11}), dev = Tensor::empty({3, 11}, DType::f32, gpu());
      comm.send_recv(out, dest, host, source, 7);
      comm.send_recv(on_gpu(out), dest, dev, source, 7);
      expect_bitwise(dev, host, gpu(), "send_recv");
    }
    {  // non-blocking all-reduces (the gradient buckets' path), completed out of start order
      Tensor a_host = random_tensor({1000}, seed), b_host = random_tensor({17, 3}, seed + 50);
      Tensor a = on_gpu(a_host), b = on_gpu(b_host);
      comm.all_reduce(a_host);
      comm.all_reduce(b_host);
      auto pa = comm.start_all_reduce(a), pb = comm.start_all_reduce(b);
      pb->wait();
      while (!pa->test()) {
      }
      expect_bitwise(a, a_host, gpu(), "start_all_reduce (first started)");
      expect_bitwise(b, b_host, gpu(), "start_all_reduce (second started)");
    }
  });
}

// ---- the halo exchange ---------------------------------------------------------------------

struct HaloCase {
  const char* name;
  int64_t depth;  // uneven over 2 ranks
  parallel::DepthWindow window;
  float padding;
};

// extend() and return_gradient() on device slabs against the same calls on host slabs
// (bitwise: copies, and one add per returned plane in rank order), and the extended slab
// against the planes of the whole tensor worked out here.
TEST_F(GpuGrid, HaloExchangeOnDeviceSlabsEqualsTheHost) {
  ending_the_job_on_error([&] {
    const float minus_inf = -std::numeric_limits<float>::infinity();
    const HaloCase cases[] = {
        {"k3_s1_p1_depth7", 7, {3, 1, 1}, 0.0f}, {"k3_s2_p1_depth9_max_pool_padding", 9, {3, 2, 1}, minus_inf},
        {"k2_s2_p0_depth9", 9, {2, 2, 0}, 0.0f}, {"k1_s1_p0_depth5", 5, {1, 1, 0}, 0.0f},
        {"k5_s1_p2_depth7", 7, {5, 1, 2}, 0.0f},
    };
    auto grid = row_grid();
    const int parts = grid->shape().rows, me = grid->row_rank();
    const int64_t B = 2, C = 3, H = 4, W = 5;
    for (const HaloCase& c : cases) {
      SCOPED_TRACE(std::string(c.name) + ", rank " + std::to_string(me));
      const parallel::DepthHalo plan = parallel::plan_depth_halo(c.name, c.depth, c.window, parts, me);
      parallel::HaloExchange exchange(grid->row(), plan, c.name);
      const Tensor whole = random_tensor({B, C, c.depth, H, W}, 11);  // the same on every rank
      const Tensor x = planes_of(whole, plan.input.owned());

      const Tensor ext_host = exchange.extend(x, c.padding);
      const Tensor ext_dev = exchange.extend(on_gpu(x), c.padding);
      expect_bitwise(ext_dev, ext_host, gpu(), "extended slab");
      // The rule itself: the needed planes inside the volume, the padding value outside.
      const Range inside{std::max<int64_t>(plan.needed.begin, 0), std::min(plan.needed.end, c.depth)};
      Tensor expected = Tensor::empty(x.shape().with(2, plan.extended_planes()));
      ops::fill(expected, c.padding);
      ops::copy_slices(planes_of(whole, inside), 2, 0, expected, inside.begin - plan.needed.begin, inside.size());
      EXPECT_TRUE(tensors_equal(ext_host, expected)) << "extended slab against the whole tensor's planes";

      const Tensor d_ext = random_tensor(ext_host.shape(), 20 + uint64_t(me));
      const Tensor dx_host = exchange.return_gradient(d_ext);
      const Tensor dx_dev = exchange.return_gradient(on_gpu(d_ext));
      expect_bitwise(dx_dev, dx_host, gpu(), "returned gradient");
      EXPECT_EQ(dx_host.shape(), x.shape());
    }
  });
}

// ---- the depth gather and its pairs -----------------------------------------------------------

// gather_blocks, own_block and reduce_scatter_blocks (parallel/mappings.h) on device
// tensors against host tensors, along depth (GatherDepth's), along positions of H W slices
// (the attention's keys and values) and along features (DistLinear's outputs): bitwise.
TEST_F(GpuGrid, GatherOwnBlockAndReduceScatterOnDeviceEqualTheHost) {
  ending_the_job_on_error([&] {
    auto grid = row_grid();
    parallel::Communicator& row = grid->row();
    const int me = row.rank();
    struct Case {
      const char* name;
      Shape whole;
      parallel::BlockSplit split;
    };
    const Case cases[] = {
        {"depth", {2, 3, 7, 4, 5}, {&row, 2, 7, 1}},
        {"positions", {2, 9, 5 * 6}, {&row, 2, 5, 6}},
        {"features", {4, 10}, {&row, 1, 10, 1}},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + ", rank " + std::to_string(me));
      const Tensor whole = random_tensor(c.whole, 31);  // the same on every rank
      const Tensor block = parallel::own_block(whole, c.split);
      expect_bitwise(parallel::own_block(on_gpu(whole), c.split), block, gpu(), "own_block");

      const Tensor gathered = parallel::gather_blocks(block, c.split);
      EXPECT_TRUE(tensors_equal(gathered, whole)) << "gather_blocks of the host blocks";
      expect_bitwise(parallel::gather_blocks(on_gpu(block), c.split), gathered, gpu(), "gather_blocks");

      // Each rank's whole differs; the sum is formed in rank order on both paths.
      const Tensor mine = random_tensor(c.whole, 40 + uint64_t(me));
      const Tensor summed = parallel::reduce_scatter_blocks(mine, c.split);
      expect_bitwise(parallel::reduce_scatter_blocks(on_gpu(mine), c.split), summed, gpu(), "reduce_scatter_blocks");
      // ... and it is this rank's block of the sum over the ranks, added in rank order.
      Tensor expected = parallel::own_block(random_tensor(c.whole, 40), c.split);
      for (int q = 1; q < row.size(); ++q)
        ops::axpy(1.0f, parallel::own_block(random_tensor(c.whole, 40 + uint64_t(q)), c.split), expected);
      EXPECT_TRUE(tensors_equal(summed, expected)) << "reduce_scatter_blocks against the sum in rank order";
    }

    // GatherDepth, the module (Replicated's first step): forward gathers, backward keeps the
    // own planes.
    nn::GatherDepth gather(row, 7);
    const Tensor whole = random_tensor({2, 3, 7, 4, 5}, 32);
    const Range planes = parallel::balanced_range(7, row.size(), me);
    expect_bitwise(gather.forward(on_gpu(planes_of(whole, planes))), whole, gpu(), "GatherDepth forward");
    const Tensor dy = random_tensor({2, 3, 7, 4, 5}, 33);
    expect_bitwise(gather.backward(on_gpu(dy)), planes_of(dy, planes), gpu(), "GatherDepth backward");
  });
}

// ---- synchronized batch norm ---------------------------------------------------------------

// BatchNorm3d with statistics over the stage, as GridLayerFactory makes it (on the CPU, then
// moved to the device), on this rank's slab on cuda:0, against the single-process layer on
// the whole tensor on the CPU: output, input gradient, running statistics, and the weight and
// bias gradients summed over the stage (on the device).
TEST_F(GpuGrid, SynchronizedBatchNormOnDeviceMatchesOneProcessOnTheCpu) {
  ending_the_job_on_error([&] {
    constexpr double kTol = 1e-5;
    test::BatchNormCase c;
    const int64_t B = c.B, C = c.C, D = c.D;
    const Tensor &x = c.x, &dy = c.dy, &y_ref = c.y_ref, &dx_ref = c.dx_ref, &y_eval_ref = c.y_eval_ref;
    nn::BatchNorm3d& ref = c.ref;

    for (const GridShape& shape : test::job_grids(test::world_size())) {
      SCOPED_TRACE(where(shape));
      auto grid = gpu_grid(shape);
      const Range samples = parallel::balanced_range(B, shape.cols, grid->col_rank());
      const Range planes = parallel::balanced_range(D, shape.rows, grid->row_rank());
      nn::BatchNorm3d bn(C, 1e-5, 0.1, Device::cpu(), &grid->stage_comm());
      c.set_affine(bn);
      bn.to(gpu());

      expect_device_slab_pass(bn, x, dy, y_ref, dx_ref, samples, planes, kTol);
      EXPECT_LE(max_relative_error(bn.running_mean(), ref.running_mean()), kTol) << "running_mean";
      EXPECT_LE(max_relative_error(bn.running_var(), ref.running_var()), kTol) << "running_var";
      EXPECT_TRUE(tensors_equal(bn.num_batches_tracked().to_host(), ref.num_batches_tracked()));
      for (auto& [name, p] : ref.named_parameters()) {
        Tensor g = find_parameter(bn, name)->grad.clone();
        EXPECT_EQ(g.device(), gpu()) << name;
        grid->stage_comm().all_reduce(g);
        EXPECT_LE(max_relative_error(g, p->grad), kTol) << "grad " << name;
      }
      bn.eval();  // the running statistics: no communication
      parallel::comm_log().clear();
      EXPECT_LE(max_relative_error(bn.forward(on_gpu(slab(x, samples, planes))), slab(y_eval_ref, samples, planes)),
                kTol)
          << "y in evaluation mode";
      EXPECT_EQ(parallel::comm_log().records().size(), 0u);
    }
  });
}

// ---- domain-parallel convolution and pooling ---------------------------------------------------

struct ConvCase {
  const char* name;
  int64_t batch, in, out, depth, h, w;
  nn::Triple3 kernel, stride, padding;
};

// DomainParallel Conv3d on device slabs over the row (halo on the device, through pinned
// staging) against Conv3d on the CPU: the output and input-gradient slabs and the weight
// gradients summed over the row, relative error <= 1e-4 (cuDNN against the CPU's kernels).
TEST_F(GpuGrid, DomainParallelConvolutionOnDeviceMatchesOneProcessOnTheCpu) {
  ending_the_job_on_error([&] {
    constexpr double kTol = 1e-4;
    const ConvCase cases[] = {
        {"k3_s1_p1", 2, 2, 3, 7, 4, 5, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
        {"k3_s2_p1", 2, 2, 3, 9, 5, 4, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
        {"k7_s2_p3_stem", 2, 1, 2, 11, 5, 5, {7, 7, 7}, {2, 2, 2}, {3, 3, 3}},
        {"k1_s2_p0_downsample", 2, 3, 2, 9, 4, 4, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}},
    };
    auto grid = row_grid();
    const int parts = grid->shape().rows, me = grid->row_rank();
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(std::string(c.name) + ", rank " + std::to_string(me));
      nn::Conv3d ref(c.in, c.out, c.kernel, c.stride, c.padding, true);
      ref.initialize(1234);
      auto conv = nn::domain_conv3d(*grid, c.in, c.out, c.kernel, c.stride, c.padding, true, c.depth);
      conv->name_modules(std::string("conv.") + c.name);
      conv->initialize(1234);
      conv->to(gpu());

      const Tensor x = random_tensor({c.batch, c.in, c.depth, c.h, c.w}, 11);
      const Tensor y = ref.forward(x);
      const Tensor dy = random_tensor(y.shape(), 12);
      const Tensor dx = ref.backward(dy);
      const Range in = parallel::balanced_range(c.depth, parts, me);
      const Range out = parallel::balanced_range(y.size(2), parts, me);

      const Tensor y_slab = conv->forward(on_gpu(planes_of(x, in)));
      EXPECT_EQ(y_slab.device(), gpu());
      EXPECT_LE(max_relative_error(y_slab, planes_of(y, out)), kTol) << "y slab";
      const Tensor dx_slab = conv->backward(on_gpu(planes_of(dy, out)));
      EXPECT_EQ(dx_slab.device(), gpu());
      EXPECT_LE(max_relative_error(dx_slab, planes_of(dx, in)), kTol) << "dx slab";
      for (auto& [name, p] : ref.named_parameters()) {
        Tensor g = find_parameter(*conv, name)->grad.clone();
        EXPECT_EQ(g.device(), gpu()) << name;
        grid->row().all_reduce(g);
        EXPECT_LE(max_relative_error(g, p->grad), kTol) << "grad " << name;
      }
    }

    // Max pooling pads with -inf planes on the device; max is exact, and the gradients of
    // overlapping windows add in either order: <= 1e-5.
    nn::MaxPool3d ref({3, 3, 3}, {2, 2, 2}, {1, 1, 1});
    auto pool = nn::domain_max_pool3d(*grid, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, 9);
    pool->to(gpu());
    const Tensor x = random_tensor({2, 2, 9, 4, 4}, 21, -2.0f, -1.0f);  // negative: -inf padding must lose
    const Tensor y = ref.forward(x);
    const Tensor dy = random_tensor(y.shape(), 22);
    const Tensor dx = ref.backward(dy);
    const Range in = parallel::balanced_range(9, parts, me), out = parallel::balanced_range(y.size(2), parts, me);
    EXPECT_LE(max_relative_error(pool->forward(on_gpu(planes_of(x, in))), planes_of(y, out)), 1e-5) << "max pool y";
    EXPECT_LE(max_relative_error(pool->backward(on_gpu(planes_of(dy, out))), planes_of(dx, in)), 1e-5) << "max pool dx";
  });
}

// ---- distributed attention ---------------------------------------------------------------

// DistSelfAttention3d on device slabs (keys and values all-gathered over the row, their
// gradients reduce-scattered, on the device) against SelfAttention3d on the CPU.
TEST_F(GpuGrid, DistributedAttentionOnDeviceMatchesOneProcessOnTheCpu) {
  ending_the_job_on_error([&] {
    constexpr double kTol = 1e-4, kGradTol = 1e-3;
    const int64_t B = 2, C = 8, D = 5, H = 3, W = 3;
    test::AttentionCase c({B, C, D, H, W});
    const Tensor &x = c.x, &dy = c.dy, &y_ref = c.y_ref, &dx_ref = c.dx_ref;
    nn::SelfAttention3d& ref = c.ref;
    const double key_scale = max_abs(find_parameter(ref, "key.weight")->grad);

    for (const GridShape& shape : test::job_grids(test::world_size())) {
      SCOPED_TRACE(where(shape));
      auto grid = gpu_grid(shape);
      const Range samples = parallel::balanced_range(B, shape.cols, grid->col_rank());
      const Range planes = parallel::balanced_range(D, shape.rows, grid->row_rank());
      nn::DistSelfAttention3d layer(*grid, C, D);
      c.set_up(layer);
      layer.to(gpu());

      expect_device_slab_pass(layer, x, dy, y_ref, dx_ref, samples, planes, kTol);
      for (auto& [name, p] : ref.named_parameters()) {
        Tensor g = find_parameter(layer, name)->grad.clone();
        grid->stage_comm().all_reduce(g);
        if (name == "key.bias") {  // zero in exact arithmetic: rounding noise, measured against dW_key
          EXPECT_LE(max_abs(g), kGradTol * key_scale) << name;
        } else {
          EXPECT_LE(max_relative_error(g, p->grad), kGradTol) << "grad " << name;
        }
      }
    }
  });
}

// ---- a training step ---------------------------------------------------------------------

// The GPU step on a grid against the GPU step on 1x1. The grid reassociates sums (batch-norm
// statistics and weight gradients over slabs and shards, halo gradients): within 1e-4 on the
// CPU (test_dist_train). On the GPU, cuDNN also chooses its algorithm per shape, and a slab
// or a batch shard has another shape than the whole batch, so the two runs may sum each
// convolution in a different order: the freedom test_gpu_train allows the GPU against the
// CPU, 1e-3. A plane, block or buffer moved wrongly changes values by their own size.
constexpr double kStepTolerance = 1e-3;

using Dump = std::map<std::string, Tensor>;

train::TrainOptions tiny_on_gpu() {
  train::TrainOptions o = test::tiny_resattnet();
  o.device = gpu();
  o.steps = 1;
  return o;
}

// The batch of test_dist_train: 8 synthetic 24x24x20 volumes of 3 classes (the same on
// every rank).
data::Batch tiny_batch() {
  data::SyntheticDataset d({8, 0, 3, 1, Shape{24, 24, 20}, 7, 0.15f});
  data::BatchLoader loader(d, {8, false, true, 7, false, 0, -1, {}, false});
  return loader.next();
}

// What --dump-step writes (train::dump_step), in memory on every rank: the whole batch's
// logits, the loss, every gradient and every updated parameter and buffer, whole.
Dump dump_step(const train::TrainOptions& o, ProcessGrid& grid, const data::Batch& full) {
  run::PipelinedModel model(o, grid);
  EXPECT_EQ(model.device(), gpu());
  const run::BatchShard shard = run::batch_shard(grid, o.batch, o.input[0]);
  Tensor logits;
  const Tensor loss = model.forward_backward(run::take_shard(full, shard), o.batch, &logits);
  EXPECT_EQ(logits.device(), gpu());
  Dump out;
  out["logits"] = run::gather_rows(grid, logits).to_host();  // gathered on the device
  out["loss"] = loss.to_host();
  for (auto& [name, g] : model.gradients()) out["grad." + name] = g.to_host();
  model.update(optim::LrSchedule(o.schedule).lr(0));
  for (auto& [name, t] : model.model_state()) out[name] = t.to_host();
  return out;
}

// The largest relative difference over the float tensors (as grid_invariance.h scales it),
// and the tensor it is in: printed, so that a GPU run shows how much room the tolerance has.
std::pair<double, std::string> largest_difference(const Dump& got, const Dump& want) {
  double largest_grad = 0, largest_value = 0;
  for (const auto& [name, t] : want) {
    if (t.dtype() == DType::i64) continue;
    double& largest = name.rfind("grad.", 0) == 0 ? largest_grad : largest_value;
    for (double v : test::to_doubles(t)) largest = std::max(largest, std::fabs(v));
  }
  std::pair<double, std::string> worst{0.0, ""};
  for (const auto& [name, ref] : want) {
    if (ref.dtype() == DType::i64 || name.find("key.bias") != std::string::npos || !got.count(name)) continue;
    const auto a = test::to_doubles(got.at(name)), b = test::to_doubles(ref);
    if (a.size() != b.size()) continue;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::fabs(a[i] - b[i]));
      scale = std::max(scale, std::fabs(b[i]));
    }
    scale = std::max(scale, 0.01 * (name.rfind("grad.", 0) == 0 ? largest_grad : largest_value));
    if (scale > 0 && diff / scale > worst.first) worst = {diff / scale, name};
  }
  return worst;
}

// The grid's step against the 1x1 step: the same tensors, integers equal, floats within
// kStepTolerance as grid_invariance.h measures them; prints the largest difference.
void expect_step_close(const Dump& got, const Dump& want, const GridShape& shape) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, ref] : want) {
    ASSERT_TRUE(got.count(name)) << name << " missing";
    ASSERT_EQ(got.at(name).shape(), ref.shape()) << name;
    if (ref.dtype() == DType::i64) {
      EXPECT_TRUE(tensors_equal(got.at(name), ref)) << name;
    }
  }
  const auto [worst, name] = largest_difference(got, want);
  std::printf("[rank %d] grid %s on %s: largest difference from the 1x1 step %.3g (in %s), tolerance %.0e\n",
              test::world_rank(), shape.str().c_str(), gpu().str().c_str(), worst, name.c_str(), kStepTolerance);
  EXPECT_LE(worst, kStepTolerance) << "largest in " << name;
}

// One step of the small ResAttNet3D on every grid of the job on cuda:0 equals the 1x1 step
// on cuda:0 (rank 0 runs it alone and compares), and a second run on the same grid is
// bitwise the first (on every rank).
TEST_F(GpuGrid, TrainingStepOnEveryGridEqualsTheOneProcessStep) {
  ending_the_job_on_error([] {
    const train::TrainOptions o = tiny_on_gpu();
    const data::Batch full = tiny_batch();
    Dump single;
    if (test::world_rank() == 0) {
      auto one = ProcessGrid::single();
      single = dump_step(o, *one, full);
    }
    for (const GridShape& shape : test::job_grids(test::world_size())) {
      SCOPED_TRACE(where(shape));
      auto grid = gpu_grid(shape);
      const Dump first = dump_step(o, *grid, full);
      const Dump second = dump_step(o, *grid, full);
      EXPECT_EQ(first.size(), second.size());
      for (const auto& [name, t] : first)
        EXPECT_TRUE(second.count(name) && tensors_equal(second.at(name), t))
            << "second run on " << shape.str() << ": " << name;
      if (test::world_rank() == 0) expect_step_close(first, single, shape);
    }
  });
}

// The pipeline's sends and receives on the device: a step in two micro-batches through one
// stage per rank equals the same step on 1x1 (rank 0 runs it alone and compares).
TEST_F(GpuGrid, PipelineStagesOnDeviceEqualTheOneProcessStep) {
  ending_the_job_on_error([] {
    train::TrainOptions o = tiny_on_gpu();
    o.micro_batches = 2;
    const data::Batch full = tiny_batch();
    Dump single;
    if (test::world_rank() == 0) {
      auto one = ProcessGrid::single();
      single = dump_step(o, *one, full);
    }
    const GridShape shape{test::world_size(), 1, 1};
    auto grid = gpu_grid(shape);
    const Dump staged = dump_step(o, *grid, full);
    if (test::world_rank() == 0) expect_step_close(staged, single, shape);
  });
}

// Two communicators of the same ranks issued in opposite orders (docs/design.md §4): rank 0
// starts an all-reduce on col, then exchanges on world, then waits; rank 1 exchanges first,
// then starts the all-reduce and waits. With NCCL each rank's exchange waits on its peer's
// NCCL stream across processes; the program must complete with the exact results.
TEST_F(GpuGrid, CommunicatorsIssuedInOppositeOrdersComplete) {
  if (test::world_size() != 2) GTEST_SKIP() << "a pair of ranks";
  ending_the_job_on_error([] {
    auto grid = gpu_grid(GridShape{1, 1, 2});
    const int rank = test::world_rank(), peer = 1 - rank;
    Tensor sum = on_gpu(Tensor::from_vector(std::vector<float>(1000, float(rank + 1)), {1000}));
    Tensor out = on_gpu(Tensor::from_vector(std::vector<float>(500, float(10 * rank)), {500}));
    Tensor in = Tensor::empty({500}, DType::f32, gpu());
    std::unique_ptr<parallel::PendingCall> pending;
    if (rank == 0) pending = grid->col().start_all_reduce(sum);
    grid->world().send_recv(out, peer, in, peer, 3);
    if (rank == 1) pending = grid->col().start_all_reduce(sum);
    if (pending) pending->wait();
    EXPECT_EQ(sum.to_vector<float>(), std::vector<float>(1000, 3.0f));
    EXPECT_EQ(in.to_vector<float>(), std::vector<float>(500, float(10 * peer)));
  });
}

// After a warm-up step, a training step on the grid copies its batch shard to the device (x
// and y: two uploads) and reads nothing back (docs/design.md §2): no download, no host read.
// The communicators' pinned staging (the MPI backend's halo, gather, batch-norm and gradient
// traffic) is counted apart (staged_*) and only printed; the loss stays on the device.
TEST_F(GpuGrid, TrainingStepUploadsItsBatchShardAndDownloadsNothing) {
  ending_the_job_on_error([&] {
    const train::TrainOptions o = tiny_on_gpu();
    const data::Batch full = tiny_batch();
    const double lr = optim::LrSchedule(o.schedule).lr(0);
    for (const GridShape& shape : test::job_grids(test::world_size())) {
      SCOPED_TRACE(where(shape));
      auto grid = gpu_grid(shape);
      run::PipelinedModel model(o, *grid);
      const data::Batch shard = run::take_shard(full, run::batch_shard(*grid, o.batch, o.input[0]));
      Tensor logits;
      model.forward_backward(shard, o.batch, &logits);  // warm-up: plans, workspaces, pinned buffers
      model.update(lr);
      synchronize(gpu());
      reset_transfer_counts();
      model.forward_backward(shard, o.batch, &logits);
      model.update(lr);
      synchronize(gpu());
      const TransferCounts c = transfer_counts();
      std::printf("[rank %d] grid %s, one training step: %s\n", test::world_rank(), shape.str().c_str(),
                  c.str().c_str());
      EXPECT_EQ(c.downloads, 0) << c.str();
      EXPECT_EQ(c.download_bytes, 0) << c.str();
      EXPECT_EQ(c.host_reads, 0) << c.str();
      EXPECT_EQ(c.uploads, 2) << "the x and y shards only: " << c.str();
      EXPECT_EQ(c.upload_bytes, int64_t(shard.x.nbytes() + shard.y.nbytes())) << c.str();
    }
  });
}

}  // namespace
}  // namespace gridnn
