// RunOptions: the device's text, validation, how volumes are read, and the network they
// describe.
#include "models/run/run_options.h"

#include <cmath>

#include "core/error.h"

namespace gridnn::run {

Device device_of(const std::string& text, int node_rank, int node_size) {
  if (text == "cuda" && node_size > 1 && cuda_device_count() > 0) return Device::cuda(node_rank % cuda_device_count());
  return Device::parse(text);
}

void validate(const RunOptions& o) {
  GRIDNN_REQUIRE(o.input.size() == 3 && o.input[0] >= 1 && o.input[1] >= 1 && o.input[2] >= 1,
                 "--input must be DxHxW with positive sizes");
  GRIDNN_REQUIRE(o.classes >= 2, "--classes must be >= 2, got ", o.classes);
  GRIDNN_REQUIRE(o.in_channels >= 1, "--in-channels must be >= 1");
  GRIDNN_REQUIRE(o.batch >= 1, "--batch must be >= 1, got ", o.batch);
  GRIDNN_REQUIRE(o.comm_timeout >= 0, "--comm-timeout must be >= 0 seconds (0: no limit), got ", o.comm_timeout);
  GRIDNN_REQUIRE(o.precision != ops::MathMode::tf32 || o.device.is_cuda(),
                 "--precision tf32 needs --device cuda (TF32 is a tensor-core format)");
  GRIDNN_REQUIRE(o.grid.stages >= 1, "--stages must be >= 1, got ", o.grid.stages);
  GRIDNN_REQUIRE(o.micro_batches >= 1 && o.micro_batches <= o.batch, "--micro-batches must be between 1 and --batch (",
                 o.batch, "), got ", o.micro_batches);
  GRIDNN_REQUIRE(std::isfinite(o.data.spacing) && o.data.spacing >= 0,
                 "--spacing must be 0 (off) or a positive number of mm, got ", o.data.spacing);
  if (o.model == Model::resattnet3d) {
    // The stem and four stride-2 stages shrink each side by 32; smaller inputs still run
    // (the convolutions pad) but the last stages then see a single voxel.
    GRIDNN_REQUIRE(o.input[0] >= 4 && o.input[1] >= 4 && o.input[2] >= 4,
                   "--input: ResAttNet3D needs every side >= 4 (32 or more is sensible)");
  }
}

std::optional<PlacementRule> placement_rule(const RunOptions& o) {
  if (o.placement.empty()) return PlacementRule::even;
  return find_enum<PlacementRule>(o.placement);
}

data::NiftiDatasetOptions nifti_dataset_options(const RunOptions& o) {
  data::NiftiDatasetOptions no;
  no.target = {o.input[0], o.input[1], o.input[2]};
  no.fit = o.data.fit;
  no.orientation = o.data.orientation;
  no.spacing = o.data.spacing;
  no.num_classes = o.classes;
  return no;
}

std::unique_ptr<nn::Module> build_model(const RunOptions& o, const nn::LayerFactory& layers, bool initialize) {
  std::unique_ptr<nn::Module> model;
  if (o.model == Model::resattnet3d) {
    nn::ResAttNetConfig c = o.resattnet;
    c.in_channels = o.in_channels;
    c.classes = o.classes;
    c.input_size = {o.input[0], o.input[1], o.input[2]};
    model = std::make_unique<nn::ResAttNet3D>(c, layers);
  } else {
    nn::MlpConfig c;
    c.sizes.push_back(o.in_channels * o.input[0] * o.input[1] * o.input[2]);
    for (int64_t h : o.mlp_hidden) c.sizes.push_back(h);
    c.sizes.push_back(o.classes);
    c.input_depth = o.input[0];
    model = std::make_unique<nn::Mlp>(c, layers);
  }
  model->name_modules();
  if (initialize) model->initialize(o.seed);
  return model;
}

}  // namespace gridnn::run
