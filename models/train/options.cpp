// TrainOptions: JSON round trip, validation, and building the model they describe.
#include "models/train/options.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace gridnn::train {

using Json = nlohmann::ordered_json;

std::string to_json(const TrainOptions& o) {
  Json j;
  j["model"] = o.model;
  j["depth"] = o.resattnet.depth;
  j["width"] = o.resattnet.width;
  j["attention3"] = o.resattnet.attention3;
  j["attention4"] = o.resattnet.attention4;
  j["mlp_hidden"] = o.mlp_hidden;
  j["in_channels"] = o.in_channels;
  j["classes"] = o.classes;
  j["input"] = o.input;
  j["batch"] = o.batch;
  j["epochs"] = o.epochs;
  j["steps"] = o.steps;
  j["optimizer"] = {{"kind", o.optimizer.kind},           {"momentum", o.optimizer.momentum},
                    {"dampening", o.optimizer.dampening}, {"nesterov", o.optimizer.nesterov},
                    {"beta1", o.optimizer.beta1},         {"beta2", o.optimizer.beta2},
                    {"eps", o.optimizer.eps},             {"weight_decay", o.optimizer.weight_decay}};
  j["schedule"] = {{"kind", o.schedule.kind},         {"lr", o.schedule.base_lr},
                   {"warmup_steps", o.schedule.warmup_steps}, {"step_size", o.schedule.step_size},
                   {"gamma", o.schedule.gamma},       {"total_steps", o.schedule.total_steps},
                   {"min_lr", o.schedule.min_lr}};
  j["data"] = {{"source", o.data.source},         {"train_samples", o.data.train_samples},
               {"val_samples", o.data.val_samples}, {"val_fraction", o.data.val_fraction},
               {"augment", o.data.augment},       {"fit", o.data.fit},
               {"cache", o.data.cache},           {"orientation", o.data.orientation},
               {"spacing", o.data.spacing}};
  j["grid"] = o.grid;
  j["stages"] = o.stages;
  j["micro_batches"] = o.micro_batches;
  j["placement"] = o.placement;
  j["device"] = o.device;
  j["comm_backend"] = o.comm_backend;
  j["precision"] = o.precision;
  j["seed"] = o.seed;
  j["eval_every"] = o.eval_every;
  return j.dump();
}

TrainOptions options_from_json(const std::string& text) {
  TrainOptions o;
  try {
    const Json j = Json::parse(text);
    o.model = j.at("model");
    o.resattnet.depth = j.at("depth");
    o.resattnet.width = j.at("width");
    o.resattnet.attention3 = j.at("attention3");
    o.resattnet.attention4 = j.at("attention4");
    o.mlp_hidden = j.at("mlp_hidden").get<std::vector<int64_t>>();
    o.in_channels = j.at("in_channels");
    o.classes = j.at("classes");
    o.input = j.at("input").get<std::vector<int64_t>>();
    o.batch = j.at("batch");
    o.epochs = j.at("epochs");
    o.steps = j.at("steps");
    const Json& opt = j.at("optimizer");
    o.optimizer.kind = opt.at("kind");
    o.optimizer.momentum = opt.at("momentum");
    o.optimizer.dampening = opt.at("dampening");
    o.optimizer.nesterov = opt.at("nesterov");
    o.optimizer.beta1 = opt.at("beta1");
    o.optimizer.beta2 = opt.at("beta2");
    o.optimizer.eps = opt.at("eps");
    o.optimizer.weight_decay = opt.at("weight_decay");
    const Json& s = j.at("schedule");
    o.schedule.kind = s.at("kind");
    o.schedule.base_lr = s.at("lr");
    o.schedule.warmup_steps = s.at("warmup_steps");
    o.schedule.step_size = s.at("step_size");
    o.schedule.gamma = s.at("gamma");
    o.schedule.total_steps = s.at("total_steps");
    o.schedule.min_lr = s.at("min_lr");
    const Json& d = j.at("data");
    o.data.source = d.at("source");
    o.data.train_samples = d.at("train_samples");
    o.data.val_samples = d.at("val_samples");
    o.data.val_fraction = d.at("val_fraction");
    o.data.augment = d.at("augment");
    o.data.fit = d.at("fit");
    o.data.cache = d.value("cache", false);  // came later
    // Orientation and spacing came later: older runs read their volumes in the stored voxel
    // order (native) at their stored spacing.
    o.data.orientation = d.value("orientation", std::string("native"));
    o.data.spacing = d.value("spacing", 0.0);
    // Pipeline options came later: older checkpoints have none (one stage).
    o.stages = j.value("stages", 1);
    o.micro_batches = j.value("micro_batches", 1);
    o.placement = j.value("placement", std::string());
    o.device = j.at("device");
    o.comm_backend = j.value("comm_backend", std::string("auto"));
    o.precision = j.at("precision");
    o.seed = j.at("seed");
    o.eval_every = j.at("eval_every");
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("training options: cannot read the JSON: ") + e.what());
  }
  return o;
}

void validate(const TrainOptions& o) {
  GRIDNN_REQUIRE(o.model == "resattnet3d" || o.model == "mlp", "--model must be resattnet3d or mlp, got '",
                 o.model, "'");
  GRIDNN_REQUIRE(o.input.size() == 3 && o.input[0] >= 1 && o.input[1] >= 1 && o.input[2] >= 1,
                 "--input must be DxHxW with positive sizes");
  GRIDNN_REQUIRE(o.classes >= 2, "--classes must be >= 2, got ", o.classes);
  GRIDNN_REQUIRE(o.in_channels >= 1, "--in-channels must be >= 1");
  GRIDNN_REQUIRE(o.batch >= 1, "--batch must be >= 1, got ", o.batch);
  GRIDNN_REQUIRE(o.epochs >= 0 && o.steps >= 0, "--epochs and --steps must not be negative");
  GRIDNN_REQUIRE(o.epochs > 0 || o.steps > 0, "give --epochs or --steps");
  GRIDNN_REQUIRE(o.on_signal == "save-exit" || o.on_signal == "exit", "--on-signal must be save-exit or exit, got '",
                 o.on_signal, "'");
  GRIDNN_REQUIRE(o.save_errors == "stop" || o.save_errors == "warn", "--save-errors must be stop or warn, got '",
                 o.save_errors, "'");
  GRIDNN_REQUIRE(o.requeue_exit_code >= 2 && o.requeue_exit_code <= 125, "--requeue-exit-code must be in 2..125 "
                 "(0 means done, 1 an error, above 125 the shell's and signals'), got ", o.requeue_exit_code);
  GRIDNN_REQUIRE(o.comm_timeout >= 0, "--comm-timeout must be >= 0 seconds (0: no limit), got ", o.comm_timeout);
  GRIDNN_REQUIRE(o.precision == "fp32" || o.precision == "tf32" || o.precision == "bf16",
                 "--precision must be fp32, tf32 or bf16, got '", o.precision, "'");
  GRIDNN_REQUIRE(o.precision != "tf32" || o.device.rfind("cuda", 0) == 0,
                 "--precision tf32 needs --device cuda (TF32 is a tensor-core format)");
  GRIDNN_REQUIRE(o.save_every >= 0 && o.eval_every >= 0, "--save-every and --eval-every must not be negative");
  GRIDNN_REQUIRE(o.log_every >= 1, "--log-every must be at least 1 (steps between reads of the loss), got ",
                 o.log_every);
  GRIDNN_REQUIRE(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  GRIDNN_REQUIRE(o.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1");
  GRIDNN_REQUIRE(o.stages >= 1, "--stages must be >= 1, got ", o.stages);
  GRIDNN_REQUIRE(o.micro_batches >= 1 && o.micro_batches <= o.batch, "--micro-batches must be between 1 and --batch (",
                 o.batch, "), got ", o.micro_batches);
  GRIDNN_REQUIRE(o.schedule.base_lr > 0, "--lr must be > 0, got ", o.schedule.base_lr);
  GRIDNN_REQUIRE(o.data.orientation == "canonical" || o.data.orientation == "native",
                 "--orientation must be canonical or native, got '", o.data.orientation, "'");
  GRIDNN_REQUIRE(std::isfinite(o.data.spacing) && o.data.spacing >= 0,
                 "--spacing must be 0 (off) or a positive number of mm, got ", o.data.spacing);
  if (o.model == "resattnet3d") {
    // The stem and four stride-2 stages shrink each side by 32; smaller inputs still run
    // (the convolutions pad) but the last stages then see a single voxel.
    GRIDNN_REQUIRE(o.input[0] >= 4 && o.input[1] >= 4 && o.input[2] >= 4,
                   "--input: ResAttNet3D needs every side >= 4 (32 or more is sensible)");
  }
}

std::unique_ptr<nn::Module> build_model(const TrainOptions& o, const nn::LayerFactory& layers, bool initialize) {
  std::unique_ptr<nn::Module> model;
  if (o.model == "resattnet3d") {
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

}  // namespace gridnn::train
