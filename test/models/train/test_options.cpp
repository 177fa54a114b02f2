// TrainOptions as a checkpoint records them: the JSON that runs of gridnn-train wrote before
// the options had enum types reads back field by field (and writes back byte for byte), every
// field survives a round trip, older JSON without the later keys reads as those runs ran, and
// every enum's names parse back to their values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/names.h"
#include "models/train/options.h"
#include "test/support/error_message.h"

namespace gridnn {
namespace {

using data::Fit;
using data::Orientation;
using ops::MathMode;
using optim::OptimizerKind;
using optim::ScheduleKind;
using parallel::CommBackend;
using parallel::RankOrder;
using run::Model;
using test::error_message;
using train::TrainOptions;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The options JSON in the metadata of checkpoints that gridnn-train wrote with string-valued
// options, verbatim:
//   gridnn-train --width 2 --depth 34 --attention layer3 --input 16x16x24 --in-channels 2 --classes 3
//     --batch 4 --train-samples 8 --val-samples 4 --steps 2 --optimizer adamw --lr 0.003 --weight-decay 0.02
//     --schedule step --step-size 7 --gamma 0.5 --warmup-steps 1 --fit resample --orientation native
//     --spacing 1.5 --no-augment --cache-data --seed 7 --eval-every 2 --precision bf16 --comm-backend mpi
//     --val-fraction 0.3 --mlp-hidden 32,16 --checkpoint-dir ckpt
const char* const kResAttNetRun =
    R"({"model":"resattnet3d","depth":34,"width":2,"attention3":true,"attention4":false,"mlp_hidden":[32,16],)"
    R"("in_channels":2,"classes":3,"input":[16,16,24],"batch":4,"epochs":0,"steps":2,"optimizer":{"kind":"adamw",)"
    R"("momentum":0.0,"dampening":0.0,"nesterov":false,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":0.02},)"
    R"("schedule":{"kind":"step","lr":0.003,"warmup_steps":1,"step_size":7,"gamma":0.5,"total_steps":0,)"
    R"("min_lr":0.0},"data":{"source":"synthetic","train_samples":8,"val_samples":4,"val_fraction":0.3,)"
    R"("augment":false,"fit":"resample","cache":true,"orientation":"native","spacing":1.5},"grid":"1x1",)"
    R"("stages":1,"micro_batches":1,"placement":"","device":"cpu","comm_backend":"mpi","precision":"bf16",)"
    R"("seed":7,"eval_every":2})";
//   mpiexec -n 2 gridnn-train --model mlp --mlp-hidden 8 --input 4x4x4 --classes 2 --batch 4 --steps 2
//     --epochs 3 --optimizer sgd --momentum 0.9 --nesterov --schedule cosine --min-lr 0.001 --lr 0.05
//     --warmup-steps 1 --stages 2 --micro-batches 2 --placement even --train-samples 8 --val-samples 4
//     --seed 3 --checkpoint-dir ckpt
const char* const kPipelinedMlpRun =
    R"({"model":"mlp","depth":18,"width":16,"attention3":true,"attention4":true,"mlp_hidden":[8],)"
    R"("in_channels":1,"classes":2,"input":[4,4,4],"batch":4,"epochs":3,"steps":2,"optimizer":{"kind":"sgd",)"
    R"("momentum":0.9,"dampening":0.0,"nesterov":true,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":-1.0},)"
    R"("schedule":{"kind":"cosine","lr":0.05,"warmup_steps":1,"step_size":1000,"gamma":0.1,"total_steps":0,)"
    R"("min_lr":0.001},"data":{"source":"synthetic","train_samples":8,"val_samples":4,"val_fraction":0.2,)"
    R"("augment":true,"fit":"crop","cache":false,"orientation":"canonical","spacing":0.0},"grid":"2x1x1",)"
    R"("stages":2,"micro_batches":2,"placement":"even","device":"cpu","comm_backend":"auto","precision":"fp32",)"
    R"("seed":3,"eval_every":0})";

// The options a checkpoint does not record keep their defaults.
void expect_unrecorded_defaults(const TrainOptions& o) {
  const TrainOptions d;
  EXPECT_EQ(o.comm_report, d.comm_report);
  EXPECT_EQ(o.profile, d.profile);
  EXPECT_EQ(o.checkpoint_dir, d.checkpoint_dir);
  EXPECT_EQ(o.save_every, d.save_every);
  EXPECT_EQ(o.keep_checkpoints, d.keep_checkpoints);
  EXPECT_EQ(o.resume, d.resume);
  EXPECT_EQ(o.init_from, d.init_from);
  EXPECT_EQ(o.metrics_path, d.metrics_path);
  EXPECT_EQ(o.progress, d.progress);
  EXPECT_EQ(o.log_every, d.log_every);
  EXPECT_EQ(o.rank_order, d.rank_order);
  EXPECT_EQ(o.comm_timeout, d.comm_timeout);
  EXPECT_EQ(o.on_signal, d.on_signal);
  EXPECT_EQ(o.requeue_exit_code, d.requeue_exit_code);
  EXPECT_EQ(o.save_errors, d.save_errors);
}

TEST(TrainOptionsJson, ReadsEveryFieldOfAResAttNetRunsCheckpoint) {
  const TrainOptions o = train::options_from_json(kResAttNetRun);
  EXPECT_EQ(o.model, Model::resattnet3d);
  EXPECT_EQ(o.resattnet.depth, 34);
  EXPECT_EQ(o.resattnet.width, 2);
  EXPECT_TRUE(o.resattnet.attention3);
  EXPECT_FALSE(o.resattnet.attention4);
  EXPECT_EQ(o.mlp_hidden, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(o.in_channels, 2);
  EXPECT_EQ(o.classes, 3);
  EXPECT_EQ(o.input, (std::vector<int64_t>{16, 16, 24}));
  EXPECT_EQ(o.batch, 4);
  EXPECT_EQ(o.epochs, 0);
  EXPECT_EQ(o.steps, 2);
  EXPECT_EQ(o.optimizer.kind, OptimizerKind::adamw);
  EXPECT_EQ(o.optimizer.momentum, 0.0);
  EXPECT_EQ(o.optimizer.dampening, 0.0);
  EXPECT_FALSE(o.optimizer.nesterov);
  EXPECT_EQ(o.optimizer.beta1, 0.9);
  EXPECT_EQ(o.optimizer.beta2, 0.999);
  EXPECT_EQ(o.optimizer.eps, 1e-8);
  EXPECT_EQ(o.optimizer.weight_decay, 0.02);
  EXPECT_EQ(o.schedule.kind, ScheduleKind::step);
  EXPECT_EQ(o.schedule.base_lr, 0.003);
  EXPECT_EQ(o.schedule.warmup_steps, 1);
  EXPECT_EQ(o.schedule.step_size, 7);
  EXPECT_EQ(o.schedule.gamma, 0.5);
  EXPECT_EQ(o.schedule.total_steps, 0);
  EXPECT_EQ(o.schedule.min_lr, 0.0);
  EXPECT_EQ(o.data.source, "synthetic");
  EXPECT_EQ(o.data.train_samples, 8);
  EXPECT_EQ(o.data.val_samples, 4);
  EXPECT_EQ(o.data.val_fraction, 0.3);
  EXPECT_FALSE(o.data.augment);
  EXPECT_EQ(o.data.fit, Fit::resample);
  EXPECT_TRUE(o.data.cache);
  EXPECT_EQ(o.data.orientation, Orientation::native);
  EXPECT_EQ(o.data.spacing, 1.5);
  EXPECT_EQ(o.grid.str(), "1x1");
  EXPECT_EQ(o.grid.stages, 1);
  EXPECT_EQ(o.micro_batches, 1);
  EXPECT_EQ(o.placement, "");
  EXPECT_EQ(o.device.str(), "cpu");
  EXPECT_EQ(o.comm_backend, CommBackend::mpi);
  EXPECT_EQ(o.precision, MathMode::bf16);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.eval_every, 2);
  expect_unrecorded_defaults(o);
  EXPECT_EQ(train::to_json(o), kResAttNetRun);  // the same keys, in the same order, with the same values
}

TEST(TrainOptionsJson, ReadsEveryFieldOfAPipelinedMlpRunsCheckpoint) {
  const TrainOptions o = train::options_from_json(kPipelinedMlpRun);
  EXPECT_EQ(o.model, Model::mlp);
  EXPECT_EQ(o.resattnet.depth, 18);
  EXPECT_EQ(o.resattnet.width, 16);
  EXPECT_TRUE(o.resattnet.attention3);
  EXPECT_TRUE(o.resattnet.attention4);
  EXPECT_EQ(o.mlp_hidden, (std::vector<int64_t>{8}));
  EXPECT_EQ(o.in_channels, 1);
  EXPECT_EQ(o.classes, 2);
  EXPECT_EQ(o.input, (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(o.batch, 4);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.steps, 2);
  EXPECT_EQ(o.optimizer.kind, OptimizerKind::sgd);
  EXPECT_EQ(o.optimizer.momentum, 0.9);
  EXPECT_EQ(o.optimizer.dampening, 0.0);
  EXPECT_TRUE(o.optimizer.nesterov);
  EXPECT_EQ(o.optimizer.beta1, 0.9);
  EXPECT_EQ(o.optimizer.beta2, 0.999);
  EXPECT_EQ(o.optimizer.eps, 1e-8);
  EXPECT_EQ(o.optimizer.weight_decay, -1.0);
  EXPECT_EQ(o.schedule.kind, ScheduleKind::cosine);
  EXPECT_EQ(o.schedule.base_lr, 0.05);
  EXPECT_EQ(o.schedule.warmup_steps, 1);
  EXPECT_EQ(o.schedule.step_size, 1000);
  EXPECT_EQ(o.schedule.gamma, 0.1);
  EXPECT_EQ(o.schedule.total_steps, 0);
  EXPECT_EQ(o.schedule.min_lr, 0.001);
  EXPECT_EQ(o.data.source, "synthetic");
  EXPECT_EQ(o.data.train_samples, 8);
  EXPECT_EQ(o.data.val_samples, 4);
  EXPECT_EQ(o.data.val_fraction, 0.2);
  EXPECT_TRUE(o.data.augment);
  EXPECT_EQ(o.data.fit, Fit::crop);
  EXPECT_FALSE(o.data.cache);
  EXPECT_EQ(o.data.orientation, Orientation::canonical);
  EXPECT_EQ(o.data.spacing, 0.0);
  EXPECT_EQ(o.grid.str(), "2x1x1");
  EXPECT_EQ(o.grid.stages, 2);
  EXPECT_EQ(o.micro_batches, 2);
  EXPECT_EQ(o.placement, "even");
  EXPECT_EQ(o.device.str(), "cpu");
  EXPECT_EQ(o.comm_backend, CommBackend::automatic);
  EXPECT_EQ(o.precision, MathMode::fp32);
  EXPECT_EQ(o.seed, 3u);
  EXPECT_EQ(o.eval_every, 0);
  expect_unrecorded_defaults(o);
  EXPECT_EQ(train::to_json(o), kPipelinedMlpRun);
}

TEST(TrainOptionsJson, EveryRecordedFieldRoundTrips) {
  TrainOptions o;
  o.model = Model::mlp;
  o.resattnet.depth = 34;
  o.resattnet.width = 5;
  o.resattnet.attention3 = false;
  o.resattnet.attention4 = false;
  o.mlp_hidden = {7, 6, 5};
  o.in_channels = 3;
  o.classes = 4;
  o.input = {8, 9, 10};
  o.batch = 6;
  o.epochs = 11;
  o.steps = 12;
  o.optimizer = {OptimizerKind::adam, 0.5, 0.25, true, 0.8, 0.99, 1e-6, 0.125};
  o.schedule = {ScheduleKind::cosine, 0.5, 3, 13, 0.75, 99, 0.0625};
  o.data = {"scans.csv", 17, 18, 0.375, false, true, Fit::resample, Orientation::native, 2.5};
  o.grid = parallel::GridShape::parse("2x3x4");
  o.grid.stages = 2;
  o.micro_batches = 5;
  o.placement = "auto";
  o.device = Device::cuda(1);
  o.comm_backend = CommBackend::nccl;
  o.precision = MathMode::tf32;
  o.seed = 123456789012345ull;
  o.eval_every = 14;
  const std::string json = train::to_json(o);
  const TrainOptions back = train::options_from_json(json);
  EXPECT_EQ(train::to_json(back), json);
  EXPECT_EQ(back.model, o.model);
  EXPECT_EQ(back.resattnet.depth, 34);
  EXPECT_EQ(back.resattnet.width, 5);
  EXPECT_FALSE(back.resattnet.attention3);
  EXPECT_FALSE(back.resattnet.attention4);
  EXPECT_EQ(back.mlp_hidden, o.mlp_hidden);
  EXPECT_EQ(back.in_channels, 3);
  EXPECT_EQ(back.classes, 4);
  EXPECT_EQ(back.input, o.input);
  EXPECT_EQ(back.batch, 6);
  EXPECT_EQ(back.epochs, 11);
  EXPECT_EQ(back.steps, 12);
  EXPECT_EQ(back.optimizer.kind, OptimizerKind::adam);
  EXPECT_EQ(back.optimizer.momentum, 0.5);
  EXPECT_EQ(back.optimizer.dampening, 0.25);
  EXPECT_TRUE(back.optimizer.nesterov);
  EXPECT_EQ(back.optimizer.beta1, 0.8);
  EXPECT_EQ(back.optimizer.beta2, 0.99);
  EXPECT_EQ(back.optimizer.eps, 1e-6);
  EXPECT_EQ(back.optimizer.weight_decay, 0.125);
  EXPECT_EQ(back.schedule.kind, ScheduleKind::cosine);
  EXPECT_EQ(back.schedule.base_lr, 0.5);
  EXPECT_EQ(back.schedule.warmup_steps, 3);
  EXPECT_EQ(back.schedule.step_size, 13);
  EXPECT_EQ(back.schedule.gamma, 0.75);
  EXPECT_EQ(back.schedule.total_steps, 99);
  EXPECT_EQ(back.schedule.min_lr, 0.0625);
  EXPECT_EQ(back.data.source, "scans.csv");
  EXPECT_EQ(back.data.train_samples, 17);
  EXPECT_EQ(back.data.val_samples, 18);
  EXPECT_EQ(back.data.val_fraction, 0.375);
  EXPECT_FALSE(back.data.augment);
  EXPECT_TRUE(back.data.cache);
  EXPECT_EQ(back.data.fit, Fit::resample);
  EXPECT_EQ(back.data.orientation, Orientation::native);
  EXPECT_EQ(back.data.spacing, 2.5);
  EXPECT_EQ(back.grid.str(), "2x3x4");
  EXPECT_EQ(back.grid.stages, 2);
  EXPECT_EQ(back.micro_batches, 5);
  EXPECT_EQ(back.placement, "auto");
  EXPECT_EQ(back.device.str(), "cuda:1");
  EXPECT_EQ(back.comm_backend, CommBackend::nccl);
  EXPECT_EQ(back.precision, MathMode::tf32);
  EXPECT_EQ(back.seed, 123456789012345ull);
  EXPECT_EQ(back.eval_every, 14);
}

// Removes `"key":value` (the value without commas) and the comma before it.
std::string without(std::string json, const std::string& key) {
  const size_t at = json.find(",\"" + key + "\":");
  EXPECT_NE(at, std::string::npos) << key;
  const size_t end = json.find_first_of(",}", at + 1);
  return json.erase(at, end - at);
}

TEST(TrainOptionsJson, OlderJsonWithoutTheLaterKeysReadsAsThoseRunsRan) {
  std::string old = kPipelinedMlpRun;
  for (const char* key : {"cache", "orientation", "spacing", "stages", "micro_batches", "placement", "comm_backend"})
    old = without(old, key);
  const TrainOptions o = train::options_from_json(old);
  EXPECT_FALSE(o.data.cache);
  EXPECT_EQ(o.data.orientation, Orientation::native);  // the stored voxel order, not today's default
  EXPECT_EQ(o.data.spacing, 0.0);
  EXPECT_EQ(o.grid.stages, 1);
  EXPECT_EQ(o.micro_batches, 1);
  EXPECT_EQ(o.placement, "");
  EXPECT_EQ(o.comm_backend, CommBackend::automatic);
  EXPECT_EQ(o.model, Model::mlp);  // the others as written
  EXPECT_EQ(o.optimizer.momentum, 0.9);
}

TEST(TrainOptionsJson, MissingKeysAndUnknownNamesAreErrors) {
  for (const char* key : {"depth", "precision", "eval_every", "lr", "fit"}) {
    const std::string message = error_message([&] { train::options_from_json(without(kResAttNetRun, key)); });
    EXPECT_TRUE(contains(message, "training options: cannot read the JSON")) << key << ": " << message;
    EXPECT_TRUE(contains(message, key)) << message;
  }
  std::string model = kResAttNetRun;
  model.replace(model.find("resattnet3d"), 11, "resnet");
  EXPECT_TRUE(contains(error_message([&] { train::options_from_json(model); }),
                       "unknown model \"resnet\"; use resattnet3d or mlp"));
  std::string precision = kResAttNetRun;
  precision.replace(precision.find("bf16"), 4, "fp16");
  EXPECT_TRUE(contains(error_message([&] { train::options_from_json(precision); }),
                       "unknown math mode \"fp16\"; use fp32 (the default, exact fp32), tf32 or bf16"));
}

// Every value of an enum has a distinct name that parses back to it; an unknown name's error
// lists them all.
template <class E>
void expect_names_round_trip() {
  const std::string unknown = error_message([] { parse_enum<E>("no such name"); });
  EXPECT_TRUE(contains(unknown, std::string("unknown ") + enum_names(E{}).what + " \"no such name\"; use ")) << unknown;
  std::vector<std::string> seen;
  for (const EnumName<E>& n : enum_names(E{})) {
    EXPECT_EQ(parse_enum<E>(n.name), n.value) << n.name;
    EXPECT_STREQ(enum_name(n.value), n.name);
    for (const std::string& other : seen) EXPECT_NE(other, n.name);
    seen.push_back(n.name);
    EXPECT_TRUE(contains(unknown, n.name)) << unknown;
  }
  EXPECT_FALSE(find_enum<E>("no such name"));
}

TEST(TrainOptionsNames, EveryOptionEnumRoundTrips) {
  expect_names_round_trip<Model>();
  expect_names_round_trip<OptimizerKind>();
  expect_names_round_trip<ScheduleKind>();
  expect_names_round_trip<MathMode>();
  expect_names_round_trip<Fit>();
  expect_names_round_trip<Orientation>();
  expect_names_round_trip<CommBackend>();
  expect_names_round_trip<RankOrder>();
  expect_names_round_trip<train::OnSignal>();
  expect_names_round_trip<train::SaveErrors>();
  expect_names_round_trip<run::PlacementRule>();
  EXPECT_EQ(enum_choices<OptimizerKind>(), "sgd, adam or adamw");
  EXPECT_EQ(enum_choices<RankOrder>(true),
            "rows-in-node (row groups on consecutive ranks, the default) or cols-in-node (column groups on "
            "consecutive ranks)");
}

TEST(TrainOptionsNames, PlacementNamesARuleOrAFile) {
  TrainOptions o;
  EXPECT_EQ(run::placement_rule(o), run::PlacementRule::even);
  o.placement = "even";
  EXPECT_EQ(run::placement_rule(o), run::PlacementRule::even);
  o.placement = "auto";
  EXPECT_EQ(run::placement_rule(o), run::PlacementRule::automatic);
  o.placement = "stages.json";
  EXPECT_FALSE(run::placement_rule(o));
}

}  // namespace
}  // namespace gridnn
