// TrainOptions: the JSON record and validation.
#include "models/train/options.h"

#include <exception>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/enum_json.h"
#include "core/error.h"

// The record's text of the typed settings: a device as "cpu" or "cuda:N" (an older record's
// "cuda" reads as cuda:0), a grid as "PrxPc" or "PsxPrxPc".
namespace nlohmann {
template <>
struct adl_serializer<gridnn::Device> {
  static void to_json(ordered_json& j, const gridnn::Device& d) { j = d.str(); }
  static void from_json(const ordered_json& j, gridnn::Device& d) { d = gridnn::run::device_of(j.get<std::string>()); }
};
template <>
struct adl_serializer<gridnn::parallel::GridShape> {
  static void to_json(ordered_json& j, const gridnn::parallel::GridShape& g) { j = g.str(); }
  static void from_json(const ordered_json& j, gridnn::parallel::GridShape& g) {
    g = gridnn::parallel::GridShape::parse(j.get<std::string>());
  }
};
}  // namespace nlohmann

namespace gridnn::train {

using Json = nlohmann::ordered_json;

namespace {

// The fields a checkpoint records, each once: its JSON key and the member it holds.
// field(key, member) is a key every recorded JSON has; field(key, member, older) one that came
// later, which a JSON without it (an older checkpoint) reads as `older`, what runs before it did;
// field.object(key, member) a nested record. One list writes and reads, so it takes the options
// mutable.
template <class Field>
void record(optim::OptimizerOptions& o, Field&& field) {
  field("kind", o.kind);
  field("momentum", o.momentum);
  field("dampening", o.dampening);
  field("nesterov", o.nesterov);
  field("beta1", o.beta1);
  field("beta2", o.beta2);
  field("eps", o.eps);
  field("weight_decay", o.weight_decay);
}

template <class Field>
void record(optim::ScheduleOptions& o, Field&& field) {
  field("kind", o.kind);
  field("lr", o.base_lr);
  field("warmup_steps", o.warmup_steps);
  field("step_size", o.step_size);
  field("gamma", o.gamma);
  field("total_steps", o.total_steps);
  field("min_lr", o.min_lr);
}

template <class Field>
void record(run::DataOptions& d, Field&& field) {
  field("source", d.source);
  field("train_samples", d.train_samples);
  field("val_samples", d.val_samples);
  field("val_fraction", d.val_fraction);
  field("augment", d.augment);
  field("fit", d.fit);
  field("cache", d.cache, false);
  // Older runs read their volumes in the stored voxel order at their stored spacing.
  field("orientation", d.orientation, data::Orientation::native);
  field("spacing", d.spacing, 0.0);
}

template <class Field>
void record(TrainOptions& o, Field&& field) {
  field("model", o.model);
  field("depth", o.resattnet.depth);
  field("width", o.resattnet.width);
  field("attention3", o.resattnet.attention3);
  field("attention4", o.resattnet.attention4);
  field("mlp_hidden", o.mlp_hidden);
  field("in_channels", o.in_channels);
  field("classes", o.classes);
  field("input", o.input);
  field("batch", o.batch);
  field("epochs", o.epochs);
  field("steps", o.steps);
  field.object("optimizer", o.optimizer);
  field.object("schedule", o.schedule);
  field.object("data", o.data);
  field("grid", o.grid);
  // Older runs had one pipeline stage.
  field("stages", o.grid.stages, 1);
  field("micro_batches", o.micro_batches, 1);
  field("placement", o.placement, std::string());
  field("device", o.device);
  field("comm_backend", o.comm_backend, parallel::CommBackend::automatic);
  field("precision", o.precision);
  field("seed", o.seed);
  field("eval_every", o.eval_every);
}

struct Writer {
  Json& j;
  template <class T, class... Older>
  void operator()(const char* key, const T& value, const Older&...) const {
    j[key] = value;
  }
  template <class Record>
  void object(const char* key, Record& r) const {
    Json nested = Json::object();
    record(r, Writer{nested});
    j[key] = std::move(nested);
  }
};

struct Reader {
  const Json& j;
  template <class T>
  void operator()(const char* key, T& value) const {
    j.at(key).get_to(value);
  }
  template <class T>
  void operator()(const char* key, T& value, const T& older) const {
    value = j.contains(key) ? j.at(key).get<T>() : older;
  }
  template <class Record>
  void object(const char* key, Record& r) const {
    record(r, Reader{j.at(key)});
  }
};

}  // namespace

std::string to_json(const TrainOptions& options) {
  TrainOptions o = options;
  Json j = Json::object();
  record(o, Writer{j});
  return j.dump();
}

TrainOptions options_from_json(const std::string& json) {
  TrainOptions o;
  try {
    const Json j = Json::parse(json);
    record(o, Reader{j});
  } catch (const std::exception& e) {  // JSON errors, and unknown names of enum values
    throw Error(std::string("training options: cannot read the JSON: ") + e.what());
  }
  return o;
}

void validate(const TrainOptions& o) {
  run::validate(o);
  GRIDNN_REQUIRE(o.epochs >= 0 && o.steps >= 0, "--epochs and --steps must not be negative");
  GRIDNN_REQUIRE(o.epochs > 0 || o.steps > 0, "give --epochs or --steps");
  GRIDNN_REQUIRE(o.requeue_exit_code >= 2 && o.requeue_exit_code <= 125,
                 "--requeue-exit-code must be in 2..125 "
                 "(0 means done, 1 an error, above 125 the shell's and signals'), got ",
                 o.requeue_exit_code);
  GRIDNN_REQUIRE(o.save_every >= 0 && o.eval_every >= 0, "--save-every and --eval-every must not be negative");
  GRIDNN_REQUIRE(o.log_every >= 1, "--log-every must be at least 1 (steps between reads of the loss), got ",
                 o.log_every);
  GRIDNN_REQUIRE(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  GRIDNN_REQUIRE(o.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1");
  GRIDNN_REQUIRE(o.schedule.base_lr > 0, "--lr must be > 0, got ", o.schedule.base_lr);
}

}  // namespace gridnn::train
