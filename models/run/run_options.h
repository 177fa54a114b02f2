// What a run on a process grid is configured by, training or prediction alike: the network,
// the input and how volumes are read, the batch, and where and how it runs (grid, pipeline
// stages, device, precision, memory). Typed values, settled once from the command line by
// the programs (tools/cli.h) or read back from a checkpoint's record
// (models/train/options.h); the runtime reads them and never rewrites them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/names.h"
#include "kernels/math_mode.h"
#include "models/data/nifti_dataset.h"
#include "models/nets/layer_factory.h"
#include "models/nets/mlp.h"
#include "models/nets/resattnet3d.h"
#include "models/optim/optimizer.h"
#include "parallel/halo.h"
#include "parallel/process_grid.h"

namespace gridnn::run {

enum class Model { resattnet3d, mlp };
inline constexpr EnumName<Model> kModelNames[] = {{Model::resattnet3d, "resattnet3d"}, {Model::mlp, "mlp"}};
constexpr EnumNames<Model> enum_names(Model) { return {"model", kModelNames}; }

// The rules --placement names; any other text names a placement file (docs/placement.md).
enum class PlacementRule { even, automatic };
inline constexpr EnumName<PlacementRule> kPlacementRuleNames[] = {
    {PlacementRule::even, "even"}, {PlacementRule::automatic, "auto", "GABRA on measured blocks"}};
constexpr EnumNames<PlacementRule> enum_names(PlacementRule) { return {"placement", kPlacementRuleNames}; }

// What a training step keeps for backward (gridnn-train --recompute, docs/design.md §6a).
enum class Recompute { none, blocks };
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::none, "none", "every layer keeps what its backward needs"},
    {Recompute::blocks, "blocks",
     "the stem, residual and attention blocks keep their input and run their forward again"}};
constexpr EnumNames<Recompute> enum_names(Recompute) { return {"recomputation", kRecomputeNames}; }

// The word that stands for generated volumes in --data (else a CSV manifest of NIfTI volumes).
inline constexpr char kSyntheticData[] = "synthetic";

struct DataOptions {
  std::string source = kSyntheticData;  // kSyntheticData or a CSV manifest of NIfTI volumes
  int64_t train_samples = 256;          // synthetic only
  int64_t val_samples = 128;            // synthetic only
  double val_fraction = 0.2;            // manifest rows without a split column
  bool augment = true;                  // random shifts / flips and fresh noise while training
  bool cache = false;                   // keep loaded training samples in memory (needs augment off)
  data::Fit fit = data::Fit::crop;      // NIfTI: crop (center crop or zero pad) | resample
  data::Orientation orientation = data::Orientation::canonical;  // NIfTI: closest RAS+ | stored voxel order
  double spacing = 0;  // NIfTI: resample to voxels of this many mm before the fit; 0: off

  bool synthetic() const { return source == kSyntheticData; }
};

struct RunOptions {
  Model model = Model::resattnet3d;
  nn::ResAttNetConfig resattnet;  // depth, width, attention switches (classes, channels below)
  std::vector<int64_t> mlp_hidden{256, 64};
  int64_t in_channels = 1;
  int64_t classes = 2;
  std::vector<int64_t> input{32, 32, 32};  // D, H, W
  int64_t batch = 8;
  optim::OptimizerOptions optimizer;  // the state the model's parameters carry
  DataOptions data;
  std::string init_from;  // weights (safetensors, PyTorch names)
  uint64_t seed = 1;

  // The grid (docs/design.md §4): Ps x Pr x Pc; the job has Ps*Pr*Pc processes.
  parallel::GridShape grid;
  // Pipeline stages (docs/design.md §7, models/run/pipelined_model.h): GPipe micro-batches per
  // step, and where the stages cut the network: a PlacementRule's name ("" is even) or a
  // placement file (placement_rule below).
  int micro_batches = 1;
  std::string placement;
  // Where each row of the grid switches from the depth split to the batch split
  // (models/dist/batch_split.h): a block's name (ResAttNet3D's "layer3.0", "att4", "head",
  // ...), or empty for none. The programs settle "auto" into a name (choose_batch_split).
  std::string batch_split_from;
  Device device = Device::cpu();  // this process's device
  parallel::CommBackend comm_backend = parallel::CommBackend::automatic;
  ops::MathMode precision = ops::MathMode::fp32;
  bool comm_report = false;  // print the per-layer communication table at the end
  bool profile = false;      // print where the steps' time went, by kind of work and by layer, at the end

  // Running on a cluster (docs/cluster.md). They change where and how long ranks run, never
  // the results, so checkpoints do not record them.
  parallel::RankOrder rank_order = parallel::RankOrder::rows_in_node;
  double comm_timeout = 300;                               // s one communication may wait; 0: forever
  parallel::HaloMode halo = parallel::HaloMode::blocking;  // a depth-split convolution's exchange (bit for bit alike)

  // Memory (docs/design.md §6a). They never change the results either.
  int64_t memory_limit = 0;    // bytes each rank's allocator may hold (pre-flight check and cap); 0: none
  bool memory_report = false;  // print each rank's predicted and measured peak at the end
  Recompute recompute = Recompute::none;
};

// The device a --device text names: "cpu", "cuda:N", or "cuda", which is GPU `node_rank`
// modulo the node's GPUs where a node runs several ranks (`node_size` > 1), else cuda:0. The
// one place the programs and the checkpoint record turn a device's text into a Device.
Device device_of(const std::string& text, int node_rank = 0, int node_size = 1);

// Checks what the options alone can tell (gridnn::Error saying which flag to change).
void validate(const RunOptions& options);
// The rule options.placement names (empty: even), or nullopt for a placement file.
std::optional<PlacementRule> placement_rule(const RunOptions& options);
// How the options read NIfTI volumes (input size, fit, orientation, spacing, classes): the
// same for training, validation and gridnn-predict.
data::NiftiDatasetOptions nifti_dataset_options(const RunOptions& options);

// The network the options describe, with the layers of `layers` (a grid's, for domain and
// batch parallelism), its modules named (state_dict names), and initialized from
// options.seed unless `initialize` is false (a network built only to describe itself).
std::unique_ptr<nn::Module> build_model(const RunOptions& options, const nn::LayerFactory& layers = nn::LayerFactory(),
                                        bool initialize = true);

}  // namespace gridnn::run
