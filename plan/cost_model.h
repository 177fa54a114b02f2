// The α–β communication model of Gholami et al. (SPAA 2018) and the grid planner built on it
// (docs/design.md §6). Pure computation: no MPI, no tensors; gridnn-plan and the tests use it.
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
// How each layer uses the grid (docs/design.md §4; B global batch, the grid Pr x Pc, P = Pr·Pc):
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

#include "core/names.h"
#include "plan/memory_model.h"

namespace gridnn::plan {

enum class LayerKind { conv, fc, pool, bn, attention, global_pool };
inline constexpr EnumName<LayerKind> kLayerKindNames[] = {
    {LayerKind::conv, "conv"},           {LayerKind::fc, "fc"},
    {LayerKind::pool, "pool"},           {LayerKind::bn, "bn"},
    {LayerKind::attention, "attention"}, {LayerKind::global_pool, "global_pool"}};
constexpr EnumNames<LayerKind> enum_names(LayerKind) { return {"layer kind", kLayerKindNames}; }
inline const char* kind_name(LayerKind kind) { return enum_name(kind); }

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
  int64_t samples = 0;  // the samples the rank runs it on (0: its batch shard; fewer past a switch to the batch split)
  bool input_gradient = true;  // false for the first layer (data)

  int64_t in_words() const { return in_channels * in_size[0] * in_size[1] * in_size[2]; }
  int64_t out_words() const { return out_channels * out_size[0] * out_size[1] * out_size[2]; }
};

struct Network {
  std::string name;
  std::vector<LayerShape> layers;
  int64_t weights() const;
};

// AlexNet as in Krizhevsky et al. 2012 (two-group conv2/4/5, 227² input, ~61M weights): the
// paper's network. gridnn's own networks describe themselves (nn::Module::describe).
Network alexnet();
// A fully connected layer d_in -> d_out with bias (weights d_in·d_out + d_out).
LayerShape fc_layer(const std::string& name, int64_t d_in, int64_t d_out);

// Measured forward+backward seconds by local batch (a calibration run, plan/calibration.h).
// seconds_at(t, b): linear between the measured batches; beyond them proportional to b
// (t(b) = t(b_max) b / b_max above, t(b_min) b / b_min below); 0 for b <= 0 or no entry.
using BatchSeconds = std::map<int64_t, double>;  // local batch -> seconds
double seconds_at(const BatchSeconds& seconds, double local_batch);

// One layer as a rank of a grid runs it: its work on a depth slab ({D, H, W} of the input it
// reads, halo planes included, and of the output it computes), measured at that shape with
// the copies the rank makes around it for the exchange, without the messages (docs/design.md
// §6). A slab is known by its sizes and FLOPs alone: an edge slab with padding planes and a
// middle one with halo planes on both sides share a table where their sizes agree.
struct SlabTable {
  std::array<int64_t, 3> in_size{1, 1, 1}, out_size{1, 1, 1};
  double forward_flops = 0;  // per sample, of this shape
  BatchSeconds seconds;
  bool matches(const LayerShape& l) const;  // the same sizes and FLOPs as the rank's layer `l`
};

// One layer's measured seconds: the whole layer (the network on one process), and the
// slabs the ranks of the calibrated grid run (gridnn-calibrate on a grid with rows).
struct ComputeTable {
  double forward_flops = 0;  // per sample, of the whole layer (0: unknown)
  BatchSeconds seconds;
  std::vector<SlabTable> slabs;
  double at(double local_batch) const { return seconds_at(seconds, local_batch); }
};
using ComputeTables = std::map<std::string, ComputeTable>;  // by layer name

// α and β of one operation on a link, fitted on that operation's samples alone (a
// calibration, plan/calibration.h), by the operation's name in a step's calls (CommCall::op:
// "all_reduce", "all_gatherv", "all_gather", "reduce_scatterv", "send_recv"). An all-reduce also adds what it
// sums, and a library may run each operation by another algorithm: one α and β for all of
// them fits none well.
struct OpLink {
  double alpha = 0;  // s per message
  double beta = 0;   // s per word
};
using OpLinks = std::map<std::string, OpLink>;

struct Machine {
  double alpha = 2e-6;      // s per message
  double beta = 4.0 / 6e9;  // s per word
  double flops = 0;         // compute rate (FLOP/s); 0: no compute term
  // Measured compute (optional): a layer with a table here costs the table's slab of its
  // shape at the local batch (times the fraction below, 1 for a rank's own layer) where one
  // matches (SlabTable::matches), else table.at(local
  // batch) times the fraction of the output it computes (its depth slab when domain-split,
  // 1/Pr when model-split), times forward_flops / table.forward_flops when the planned
  // layer's shape differs from the measured one (both known); the others use `flops` as above.
  std::shared_ptr<const ComputeTables> compute = nullptr;
  OpLinks ops = {};  // α, β per operation, where measured (gridnn's own step, estimate_ranks)
};

// The α and β of one communicator, and of each communicator of the grid: row (the Pr ranks
// of a batch shard), col (the Pc ranks of a row block), world (all P ranks; a real run's
// "stage"). A machine of one level runs them all at its own α and β (Links::flat); a
// machine of several nodes gives each the link it crosses (plan/node_layout.h).
struct Link {
  double alpha = 2e-6;      // s per message
  double beta = 4.0 / 6e9;  // s per word
  OpLinks ops = {};         // per operation, where measured: a call of one costs its own α, β
  OpLink of(const std::string& op) const;
};
struct Links {
  Link row, col, world;
  static Links flat(const Machine& m) {
    const Link l{m.alpha, m.beta, m.ops};
    return {l, l, l};
  }
};

// One rank's compute seconds for layer `l` on `samples` local samples, `fraction` of its
// output: the measured table when `m` has one for l.name (its slab of l's shape times
// `fraction`, which gridnn's own step, estimate_ranks, gives as 1: l is already the rank's
// part), else 3 x forward FLOPs / m.flops (0 without a rate).
double layer_compute_s(const LayerShape& l, double samples, double fraction, const Machine& m);

enum class LayerUse { batch, model, domain };
inline constexpr EnumName<LayerUse> kLayerUseNames[] = {
    {LayerUse::batch, "batch"}, {LayerUse::model, "model"}, {LayerUse::domain, "domain"}};
constexpr EnumNames<LayerUse> enum_names(LayerUse) { return {"layer distribution", kLayerUseNames}; }
inline const char* use_name(LayerUse use) { return enum_name(use); }

struct Strategy {
  LayerUse conv = LayerUse::domain;  // convolutions, pooling, BN, attention
  LayerUse fc = LayerUse::model;
  bool paper_convention = true;  // see the header comment
};
// The paper's strategies by equation.
Strategy pure_batch();          // Eq. 4 (on 1 x P)
Strategy pure_model();          // Eq. 3 (on P x 1)
Strategy pure_domain();         // Eq. 7 (on P x 1)
Strategy model_batch();         // Eq. 8: convolutions batch, FC on the grid
Strategy model_batch_domain();  // Eq. 9: convolutions domain over Pr, FC on the grid

struct Grid {
  int rows = 1, cols = 1;  // Pr x Pc
  int procs() const { return rows * cols; }
};

// One collective (or halo exchange) of one layer.
struct CommTerm {
  std::string what;        // "all-reduce dW over Pc", "halo forward over Pr", ...
  double words = 0;        // per process
  double messages = 0;     // α count
  double latency_s = 0;    // α · messages
  double bandwidth_s = 0;  // β · words
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
  // Appends a layer and adds its terms and compute to the totals.
  void add(LayerCost layer);
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
PlanCost estimate(const Network& net, int64_t batch, Grid grid, const Machine& m, const Strategy& s);
// The same with each term at the α and β of its communicator ("over Pr": row, "over Pc":
// col, "over P": world); compute from `m` (its α and β unused). With Links::flat(m) it is
// the estimate above, to the last bit.
PlanCost estimate(const Network& net, int64_t batch, Grid grid, const Machine& m, const Strategy& s,
                  const Links& links);
// Every factorization Pr x Pc of P, Pr ascending (1 x P, the pure batch run, first).
std::vector<PlanCost> sweep(const Network& net, int64_t batch, int procs, const Machine& m, const Strategy& s);
// The index of the fastest (total time; ties: the first) in a sweep.
size_t best_index(const std::vector<PlanCost>& plans);

// The bandwidth-optimal Pr for the FC layers, sqrt(2 P ΣW / (3 B Σd)), with Σd the
// activation words the FC part moves per sample and layer (gathers plus twice the reduces,
// over 3).
double optimal_fc_rows(const Network& net, int64_t batch, int procs, const Strategy& s);

// ---- the words of a real run -----------------------------------------------------------
//
// gridnn runs a network on Pr x Pc not quite as any of the paper's strategies above (depth
// slabs while the depth allows, hand-overs to replicated layers, 1.5D linear layers where
// each row rank gets an output, synchronized batch norm; docs/design.md §4). Its modules
// describe one training step of one rank themselves (nn::Module::describe): the work of
// each layer on the rank (its depth slab, its row block: the layer's shape as the rank runs
// it) and every collective the rank takes part in, in CommLog's convention
// (parallel/communicator.h) — so the words predicted here are the words the communicators
// count (test/models/run/test_words.cpp). On one process the layers are the network's
// own, whole.
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
  bool backward = false;  // made by the layer's backward (a recomputed forward repeats the others)
};
// A call of `op` with this rank's `elements` on a communicator of `procs` ranks, of which
// it receives `received` words (all_gatherv, reduce_scatterv, send_recv; all_reduce counts
// its own 2(p−1)/p·elements): words and messages in the α–β convention.
CommCall make_call(const std::string& layer, const std::string& comm, const std::string& op, int64_t elements,
                   int procs, double received = 0);

// One training step on one rank: its layers in forward order, each as the rank runs it (a
// measured compute table of the whole layer is scaled by the FLOP ratio), and its
// collectives in order.
struct RankStep {
  int row = 0, col = 0;
  int64_t samples = 0;  // this rank's batch shard
  std::vector<LayerShape> layers;
  std::vector<CommCall> calls;
  std::vector<LayerMemory> memory;  // what each layer keeps and allocates (plan/memory_model.h)
};
// One step of the whole grid from every rank's description: each layer's terms are its
// calls (a "<layer> (gather)" counts to its layer) with the most words and messages any rank
// has in them (every rank makes the same calls in the same order), then "loss" and
// "gradients"; compute is the slowest rank's part of each layer on its samples. A call costs
// the α and β of its operation where the machine has them (Machine::ops), else the machine's.
PlanCost estimate_ranks(const std::vector<RankStep>& ranks, Grid grid, const Machine& m);
// The same with each call at the α and β of its communicator ("row", "col"; "stage" and any
// other at world's), of its operation where the link has them (Link::ops); compute from `m`.
PlanCost estimate_ranks(const std::vector<RankStep>& ranks, Grid grid, const Machine& m, const Links& links);
// The layers of a description as a Network (for the paper's strategies).
Network network_of(const RankStep& step, const std::string& name);
// (layer, comm, op) -> elements summed over the calls: what CommLog::elements(comm, op, layer)
// reports after one step.
using CommKey = std::tuple<std::string, std::string, std::string>;
std::map<CommKey, int64_t> comm_elements(const std::vector<CommCall>& calls);

}  // namespace gridnn::plan
