// The α–β communication model of Gholami et al. (SPAA 2018) and the grid planner built on it
// (DESIGN §6). Pure computation: no MPI, no tensors; gridnn-plan and the tests use it.
//
// Units: α in seconds per message, β in seconds per word, sizes in words (one fp32 value = one
// word = 4 bytes; a link of 6 GB/s is β = 4 / 6e9 s per word). Per-process words: what one
// rank receives, the paper's conventions:
//   all-gather of n words on p ranks   α⌈log2 p⌉ + β (p−1)/p n
//   all-reduce of n words              twice that (reduce-scatter + all-gather)
//   reduce-scatter of n words          as the all-gather
//   halo exchange of v words           α + β v   (v: the words of the most planes any rank
//                                      receives; one α even where it hears from both sides)
//   nothing to move (n = 0, p = 1)     0
//
// How each layer uses the grid (DESIGN §4; B global batch, the grid Pr x Pc, P = Pr·Pc):
//   batch   B/P samples per rank, the whole layer; weights all-reduced over P        (Eq. 4)
//   model   1.5D over Pr on B/Pc samples: Y all-gathered over Pr (forward), dX all-reduced
//           over Pr (backward), the W block |W|/Pr all-reduced over Pc               (Eq. 3, 8)
//   domain  a depth slab over Pr of B/Pc samples: halo planes exchanged over Pr each way,
//           weights all-reduced over P                                                (Eq. 7, 9)
// On 1 x P every use is pure batch (Eq. 4); on P x 1 "model" everywhere is pure model
// (Eq. 3) and "domain" for convolutions pure domain (Eq. 7). Strategy picks the use of the
// convolutions (and their pooling, BN, attention); fully connected layers always use "model".
//
// Paper convention (on by default, see test/plan/test_cost_model.cpp): the input gradient of
// the first fully connected layer after batch-parallel layers is not sent back (the paper's
// backward sum starts at i = 2); its forward all-gather of d_0 is counted. Off, the model
// counts the reduce-scatter that hands each rank its B/P rows of dX back.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace gridnn::plan {

enum class LayerKind { conv, fc, pool, bn, attention, global_pool };
const char* kind_name(LayerKind kind);

// One layer's shape. fc: in_channels = d_in, out_channels = d_out, sizes {1, 1, 1}.
// in_size/out_size are {D, H, W}; the domain split is over D (for 2D nets, D is the height).
struct LayerShape {
  std::string name;
  LayerKind kind = LayerKind::conv;
  int64_t in_channels = 0, out_channels = 0;
  std::array<int64_t, 3> in_size{1, 1, 1}, out_size{1, 1, 1};
  int64_t kernel = 1, stride = 1, padding = 0;  // along the split dimension
  int64_t weights = 0;                          // parameters (weights and biases)
  double forward_flops = 0;                     // per sample
  bool input_gradient = true;                   // false for the first layer (data)

  int64_t in_words() const { return in_channels * in_size[0] * in_size[1] * in_size[2]; }
  int64_t out_words() const { return out_channels * out_size[0] * out_size[1] * out_size[2]; }
};

struct Network {
  std::string name;
  std::vector<LayerShape> layers;
  int64_t weights() const;
};

// AlexNet as in Krizhevsky et al. 2012 (two-group conv2/4/5, 227² input, ~61M weights).
Network alexnet();
struct ResAttNetShape {
  int depth = 18;
  int64_t width = 16, in_channels = 1, classes = 2;
  std::array<int64_t, 3> input{32, 32, 32};
  bool attention3 = true, attention4 = true;
};
// The layers of models/nets/resattnet3d.h, in forward order.
Network resattnet3d(const ResAttNetShape& shape);
// fc1..fcK over sizes {in, hidden..., classes}.
Network mlp(const std::vector<int64_t>& sizes);

// One layer's measured forward+backward seconds by local batch (a calibration run,
// plan/calibration.h). at(b): linear between the measured batches; beyond them
// proportional to b (t(b) = t(b_max) b / b_max above, t(b_min) b / b_min below); 0 for b <= 0.
struct ComputeTable {
  double forward_flops = 0;           // per sample, of the shape measured (0: unknown)
  std::map<int64_t, double> seconds;  // local batch -> seconds
  double at(double local_batch) const;
};
using ComputeTables = std::map<std::string, ComputeTable>;  // by layer name

struct Machine {
  double alpha = 2e-6;        // s per message
  double beta = 4.0 / 6e9;    // s per word
  double flops = 0;           // compute rate (FLOP/s); 0: no compute term
  // Measured compute (optional): a layer with a table here costs table.at(local batch) times
  // the fraction of the output it computes (its depth slab when domain-split, 1/Pr when
  // model-split), times forward_flops / table.forward_flops when the planned layer's shape
  // differs from the measured one (both known); the others use `flops` as above.
  std::shared_ptr<const ComputeTables> compute = nullptr;
};

// One rank's compute seconds for layer `l` on `samples` local samples, `fraction` of its
// output: the measured table when `m` has one for l.name, else 3 x forward FLOPs / m.flops
// (0 without a rate).
double layer_compute_s(const LayerShape& l, double samples, double fraction, const Machine& m);

enum class LayerUse { batch, model, domain };
const char* use_name(LayerUse use);

struct Strategy {
  LayerUse conv = LayerUse::domain;  // convolutions, pooling, BN, attention
  LayerUse fc = LayerUse::model;
  bool paper_convention = true;      // see the header comment
  // As gridnn itself runs the network (gridnn_calls below; conv and fc are then ignored):
  // each layer's terms are its calls' received words (max over the ranks), plus the layers
  // "loss" and "gradients". ResAttNet3D (resattnet3d()) only.
  bool gridnn_runtime = false;
};
// The paper's strategies by equation.
Strategy pure_batch();           // Eq. 4 (on 1 x P)
Strategy pure_model();           // Eq. 3 (on P x 1)
Strategy pure_domain();          // Eq. 7 (on P x 1)
Strategy model_batch();          // Eq. 8: convolutions batch, FC on the grid
Strategy model_batch_domain();   // Eq. 9: convolutions domain over Pr, FC on the grid
Strategy as_gridnn_runs();       // gridnn's own distribution (gridnn_runtime)

struct Grid {
  int rows = 1, cols = 1;  // Pr x Pc
  int procs() const { return rows * cols; }
};

// One collective (or halo exchange) of one layer.
struct CommTerm {
  std::string what;       // "all-reduce dW over Pc", "halo forward over Pr", ...
  double words = 0;       // per process
  double messages = 0;    // α count
  double latency_s = 0;   // α · messages
  double bandwidth_s = 0; // β · words
  double seconds() const { return latency_s + bandwidth_s; }
};

struct LayerCost {
  std::string layer;
  LayerUse use = LayerUse::batch;
  std::vector<CommTerm> terms;
  double compute_s = 0;
  double words() const;
  double comm_s() const;
};

struct PlanCost {
  Grid grid;
  std::vector<LayerCost> layers;
  double words = 0, latency_s = 0, bandwidth_s = 0, compute_s = 0;
  double comm_s() const { return latency_s + bandwidth_s; }
  double total_s() const { return comm_s() + compute_s; }
};

// The collectives' costs (words per process, seconds).
CommTerm all_gather(const std::string& what, double n, int p, const Machine& m);
CommTerm all_reduce(const std::string& what, double n, int p, const Machine& m);
CommTerm halo(const std::string& what, double volume, const Machine& m);

// The most input planes any of `parts` ranks receives from the others for a window (kernel,
// stride, padding) over `d_in` planes, both sides split balanced (parallel/halo.h's rule).
int64_t halo_planes(int64_t d_in, int64_t kernel, int64_t stride, int64_t padding, int parts);

// One training step (forward + backward; compute = 3 x forward FLOPs) of `net` at global
// batch `batch` on `grid`.
PlanCost estimate(const Network& net, int64_t batch, Grid grid, const Machine& m,
                  const Strategy& s);
// Every factorization Pr x Pc of P, Pr ascending (1 x P, the pure batch run, first).
std::vector<PlanCost> sweep(const Network& net, int64_t batch, int procs, const Machine& m,
                            const Strategy& s);
// The index of the fastest (total time; ties: the first) in a sweep.
size_t best_index(const std::vector<PlanCost>& plans);

// The bandwidth-optimal Pr for the FC layers, sqrt(2 P ΣW / (3 B Σd)), with Σd the
// activation words the FC part moves per sample and layer (gathers plus twice the reduces,
// over 3).
double optimal_fc_rows(const Network& net, int64_t batch, int procs, const Strategy& s);

// ---- the words of a real run -----------------------------------------------------------
//
// gridnn itself (models/dist/factory.cpp, models/train/) runs a network on Pr x Pc not quite
// as any of the paper's strategies above: convolutions, pooling, batch norm and attention are
// domain-split while their depth is >= Pr (> 1), else replicated on the row after a hand-over
// that all-gathers the depth slabs ("<layer> (gather)"); batch norm all-reduces [C + 3]
// (sum(x) and the count's digits) and [2, C] forward and [2, C] backward over the stage (split) or col
// (replicated; recorded even where col has one rank); a fully connected layer is 1.5D when
// Pr > 1 and it has at least Pr outputs (DistLinear: its Y blocks all-gathered forward, dX
// all-reduced backward over the row, each rank's row block of W and b a gradient over col),
// else replicated; the replicated and 1.5D layers' gradients are all-reduced over col, the
// split layers' over the stage ("gradients", skipped where the group has one rank); the loss
// sum is all-reduced over col (2 floats, "loss", skipped on one batch shard).
//
// gridnn_calls lists what rank (row, col) contributes to each collective of one
// ModelOnGrid::forward_backward in CommLog's convention (parallel/communicator.h: all_reduce
// the tensor's elements, all_gatherv this rank's block, reduce_scatterv the whole input,
// send_recv what it sends). Halo planes and batch rows depend on the rank (balanced ranges,
// the first ones get one more), so the calls do too. Gradients are given per group (their sum
// over buckets: the bucket size splits them, the total does not change). A 1 x 1 grid runs
// the single-process layers: no calls. The networks must come from resattnet3d() (mlp()
// layers carry no depth: use gridnn_mlp_calls).
struct CommCall {
  std::string layer;     // CommLayerScope label: state_dict name, "<name> (gather)", "loss", "gradients"
  std::string comm;      // "row", "col", "stage"
  std::string op;        // "all_reduce", "all_gatherv", "reduce_scatterv", "send_recv"
  int64_t elements = 0;  // this rank's, as CommRecord::elements
  int procs = 1;         // the communicator's size
  // The same call in the α–β model's convention (received words per process, as above):
  // all_reduce 2(p−1)/p·n, all_gatherv the others' blocks, reduce_scatterv the whole input
  // less this rank's block, send_recv the halo planes this rank receives; messages as above.
  double words = 0, messages = 0;
};
std::vector<CommCall> gridnn_calls(const Network& net, int64_t batch, Grid grid, int row, int col);
// An MLP run by gridnn (models/nets/mlp.h) on an input [B, C, D, H, W] (D = depth, split over
// the rows: one unlabelled "GatherDepth" all_gatherv when Pr > 1), fc layers 1.5D or
// replicated as above.
std::vector<CommCall> gridnn_mlp_calls(const Network& mlp, int64_t batch, std::array<int64_t, 4> input_cdhw,
                                       Grid grid, int row, int col);
// (layer, comm, op) -> elements summed over the calls: what CommLog::elements(comm, op, layer)
// reports after one step.
using CommKey = std::tuple<std::string, std::string, std::string>;
std::map<CommKey, int64_t> comm_elements(const std::vector<CommCall>& calls);

}  // namespace gridnn::plan
