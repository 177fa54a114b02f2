// Calibration of the α–β cost model (docs/design.md §6, plan/cost_model.h) on the machine at hand:
// α and β fitted per communicator kind from timed collectives, and each layer's measured
// forward+backward seconds by local batch. gridnn-calibrate writes it as JSON; gridnn-plan
// --calibration reads it back; bench_collectives reuses the timing and the fit.
//
// The fit uses the model's own conventions (words = 4-byte elements received per process,
// messages = α count), so its α and β plug straight into plan::Machine:
//   op               messages      words
//   all_reduce       2⌈log2 p⌉     2(p−1)/p · n
//   all_gather       ⌈log2 p⌉      (p−1)/p · n     (n: the gathered, whole output)
//   reduce_scatter   ⌈log2 p⌉      (p−1)/p · n     (n: the whole input)
//   pingpong         1             n               (one way: half a round trip)
//   halo             1             planes received (n to and from each neighbour on a chain:
//                                  2n where a rank has two, n on 2 ranks)
// t = α·m + β·w is fitted by least squares on the relative errors (each sample weighted by
// 1/t², so 1-word and 4M-word samples count alike), with α, β ≥ 0: over all samples of a
// communicator kind, and over each operation's own (fit_per_op).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "plan/cost_model.h"

namespace gridnn::plan {

// One timed operation: the max over the ranks of the median over repetitions.
struct CommSample {
  std::string op;        // "all_reduce", "all_gather", "reduce_scatter", "pingpong", "halo"
  int procs = 1;         // the communicator's size
  int64_t elements = 0;  // n as in the table above
  double seconds = 0;
};

// (messages, words) of a sample in the model's conventions; gridnn::Error for an unknown op.
std::pair<double, double> model_messages_words(const std::string& op, int procs, int64_t elements);

struct CommFit {
  double alpha = 0;     // s per message
  double beta = 0;      // s per 4-byte word
  double residual = 0;  // root mean square relative error of the fit over the samples
  std::vector<CommSample> samples;
};

// A communicator kind's fit over all its samples, and each operation's over its own
// (fit_per_op): machine_from hands the latter to the model as Machine::ops.
struct KindFit : CommFit {
  std::map<std::string, CommFit> ops;  // by sample op: "all_reduce", "all_gather", "reduce_scatter", "halo"
};

// Least-squares α, β ≥ 0 (see the header comment) over `samples`; samples that move nothing
// (p = 1) are ignored. gridnn::Error unless at least two samples with distinct word counts
// (or otherwise independent m, w) remain: one size cannot separate α from β.
CommFit fit_alpha_beta(const std::vector<CommSample>& samples);
// The fit over all `samples`, and one per operation among them (each op's samples alone, the
// pingpong's left out: no step makes that call; an operation too few sizes of which were
// measured gets none, and the kind's fit costs its calls).
KindFit fit_per_op(const std::vector<CommSample>& samples);
// The names of a sample op among a step's calls (CommCall::op): all_gather -> all_gatherv and
// all_gather (blocks of any and of equal sizes), reduce_scatter -> reduce_scatterv, halo ->
// send_recv (the halo's, and a switch to the batch split's all-to-all rounds); all_reduce as
// it is; none for pingpong.
std::vector<std::string> call_ops(const std::string& sample_op);

struct Calibration {
  std::string machine;  // free text: host name, CPU, interconnect
  std::string date;     // ISO 8601 (UTC)
  std::string grid;     // "2x2": the grid the communicators came from
  int procs = 1;
  std::string model;                    // the network whose layers were timed ("" when none)
  std::map<std::string, KindFit> comm;  // "row", "col", "world", "pingpong"
  ComputeTables compute;                // layer name -> local batch -> seconds, and the slabs of a grid with rows
};

// JSON (format "gridnn-calibration", version 1). The readers throw gridnn::Error naming the
// file (`source`) and the field ("calib.json: comm.world.alpha: expected a number").
std::string calibration_to_json(const Calibration& c);
Calibration calibration_from_json(const std::string& text, const std::string& source);
Calibration read_calibration(const std::string& path);
// Writes `path` atomically (a temporary file beside it, then rename).
void write_calibration(const Calibration& c, const std::string& path);

// A Machine with α, β of `kind` and of each of its operations (Machine::ops; gridnn::Error
// naming the kinds present when it is missing; kind "" keeps `base`'s α, β and ops) and the
// calibration's compute tables; flops from `base`.
Machine machine_from(const Calibration& c, const std::string& kind, const Machine& base = {});

// ---- measurement (any Communicator; on one rank every collective moves nothing) --------

struct TimingOptions {
  int warmup = 2;
  int reps = 10;
};

// Times `op` (the table above) on `comm` for each n in `sizes`: per size `warmup` untimed
// runs, then `reps` runs each after a barrier; this rank's median, then the max over the
// ranks of `comm` (an all_reduce max: every rank returns the same samples). pingpong runs
// between ranks 0 and 1 of `comm` (the others wait); halo sends n elements to each
// neighbour on the chain 0 - 1 - ... - p-1 and receives as many from each. Collective over
// `comm`; needs comm.size() >= 2 for pingpong and halo.
std::vector<CommSample> time_comm_op(parallel::Communicator& comm, const std::string& op,
                                     const std::vector<int64_t>& sizes, const TimingOptions& o = {});

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

}  // namespace gridnn::plan
