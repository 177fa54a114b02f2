// What the gridnn-* programs share: reading sizes and named choices from the command line, and
// the shape of their main() (errors become one line on stderr and a non-zero exit status; under
// MPI one failing rank ends the whole job).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/names.h"
#include "models/nets/resattnet3d.h"
#include "models/run/run_options.h"
#include "parallel/process_grid.h"

namespace gridnn::cli {

// "32x48x40" -> {32, 48, 40}: three positive integers joined by 'x'. Otherwise a
// gridnn::Error "<flag>: expected DxHxW with positive integers (e.g. 32x32x32), got '...'".
std::array<int64_t, 3> parse_size(const std::string& flag, const std::string& text);

// A flag whose value is the name of a value of enum E (core/names.h), of `allowed` when given:
// --help lists the names (and, with capture_default_str, the default's), and any other value is
// refused with the list, as CLI::IsMember refuses.
template <class E>
CLI::Option* add_enum_option(CLI::App& app, const std::string& flag, E& value, const std::string& help,
                             std::vector<E> allowed = {}) {
  if (allowed.empty())
    for (const EnumName<E>& n : enum_names(E{})) allowed.push_back(n.value);
  std::string names;
  for (E e : allowed) names += (names.empty() ? "{" : ",") + std::string(enum_name(e));
  names += "}";
  CLI::Validator choice(
      [allowed, names](std::string& text) {
        const std::optional<E> e = find_enum<E>(text);
        if (!e || std::find(allowed.begin(), allowed.end(), *e) == allowed.end()) return text + " not in " + names;
        text = std::to_string(static_cast<int>(*e));  // CLI11 reads an enum as its number
        return std::string();
      },
      names);
  return app.add_option(flag, value, help)->type_name("TEXT")->transform(choice)->default_function([&value] {
    return std::string(enum_name(value));
  });
}

// --attention of gridnn-train and gridnn-predict: the ResAttNet3D stages followed by self-attention.
enum class Attention { both, layer3, layer4, none };
inline constexpr EnumName<Attention> kAttentionNames[] = {
    {Attention::both, "both"}, {Attention::layer3, "layer3"}, {Attention::layer4, "layer4"}, {Attention::none, "none"}};
constexpr EnumNames<Attention> enum_names(Attention) { return {"attention", kAttentionNames}; }
void set_attention(Attention attention, nn::ResAttNetConfig& config);

// The models the planning programs describe: gridnn's, and in gridnn-plan also the paper's
// AlexNet, which gridnn does not train.
enum class PlanModel { resattnet3d, mlp, alexnet };
inline constexpr EnumName<PlanModel> kPlanModelNames[] = {{PlanModel::resattnet3d, enum_name(run::Model::resattnet3d)},
                                                          {PlanModel::mlp, enum_name(run::Model::mlp)},
                                                          {PlanModel::alexnet, "alexnet"}};
constexpr EnumNames<PlanModel> enum_names(PlanModel) { return {"model", kPlanModelNames}; }

// The network flags of the programs that plan or measure a run (gridnn-plan,
// gridnn-calibrate): --model (alexnet too where `paper` is set), --depth, --width, --input,
// --in-channels, --classes, --mlp-sizes (in, hidden..., classes).
struct ModelFlags {
  PlanModel model = PlanModel::resattnet3d;
  std::string input = "32x32x32";
  run::RunOptions run;  // depth, width, channels, classes
  std::vector<int64_t> mlp_sizes{1024, 512, 10};
};
void add_model_flags(CLI::App& app, ModelFlags& flags, bool paper);
// The run options of the network the flags name (gridnn::Error for a bad --input or
// --mlp-sizes), with `batch` samples per step.
run::RunOptions model_options(const ModelFlags& flags, int64_t batch);

// The process a program runs as: its world rank and size, and its place among the ranks of
// its node (`--device cuda` gives rank i of a node GPU i).
struct Process {
  int rank = 0, size = 1;
  int node_rank = 0, node_size = 1;
  std::vector<int> node_of_rank{0};  // every world rank's node (MpiSession::node_of_rank)
};

// The settings a program settles once from its flags, before anything runs: what the words
// that depend on the job stand for on this process. Its options then hold typed values that
// nothing rewrites (models/run/run_options.h).
//
// --device: run::device_of, with the process's place among its node's ranks ("cuda": rank i of
// a node on GPU i, modulo the node's GPUs).
Device process_device(const std::string& text, const Process& process);
// --memory-limit's bytes (docs/design.md §6a): a size (parse_bytes, core/bytes.h) or "auto", the
// default on a GPU (`text` empty there): what `device` can still give, shared by the ranks
// that compute in its memory (parallel::ranks_sharing_device: a GPU's, or the host's for the
// CPU), less a margin (a tenth, at least 512 MiB: the CUDA context and the libraries' own
// buffers, which the allocators do not see); the smallest over the job's ranks, so that every
// rank plans alike. 0 (no limit): `text` empty on the CPU, or auto where no rank can read its
// memory. Collective over the job.
int64_t memory_limit(const std::string& text, const Device& device, const Process& process);

// The process grid of a run's settled options: options.grid over the job, with their
// communication backend and rank order, on their device.
std::unique_ptr<parallel::ProcessGrid> create_grid(const run::RunOptions& options);

// Runs `body` as the main() of a program that may run under mpiexec: in MPI builds inside
// an MpiSession (an exception on any rank ends the job with "gridnn: rank R failed: <why>";
// alone, "gridnn: error: <why>" and exit status 1), without MPI as one process with the
// same single-process message. Returns body's exit status.
int run_mpi_program(int* argc, char*** argv, const std::function<int(const Process&)>& body);

// Runs `body` as the main() of a single-process program: an exception prints
// "<program>: error: <why>" on stderr and returns 1.
int run_program(const char* program, const std::function<int()>& body);

}  // namespace gridnn::cli
