// The training loop and single-step mode (see trainer.h).
#include "models/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/math_mode.h"
#include "models/data/loader.h"
#include "models/data/nifti_dataset.h"
#include "models/data/synthetic.h"

namespace gridnn::train {

namespace {

using Json = nlohmann::ordered_json;

// Sample ids of the synthetic validation set start here, far from the training ids.
constexpr int64_t kSyntheticValidationFirstId = int64_t(1) << 32;

Shape sample_shape(const TrainOptions& o) {
  return {o.in_channels, o.input[0], o.input[1], o.input[2]};
}

// Convolutions and GEMMs in the chosen math; parameters, gradients and optimizer state stay
// fp32 (master weights). On the CPU, bf16 is emulated (operands rounded): for tests.
void apply_precision(nn::Module& model, const TrainOptions& o) {
  model.set_math_mode(ops::parse_math_mode(o.precision));
}

Json metrics_json(const Metrics& m) {
  Json j = {{"samples", m.samples}, {"loss", m.loss}, {"accuracy", m.accuracy}};
  if (m.binary) {
    j["sensitivity"] = m.sensitivity;
    j["specificity"] = m.specificity;
    j["auc"] = m.auc;
  }
  return j;
}

std::string metrics_text(const Metrics& m) {
  char text[256];
  int n = std::snprintf(text, sizeof text, "loss %.4f  accuracy %.4f (%lld samples)", m.loss,
                        m.accuracy, static_cast<long long>(m.samples));
  if (m.binary)
    std::snprintf(text + n, sizeof text - size_t(n), "  sensitivity %.4f  specificity %.4f  AUC %.4f",
                  m.sensitivity, m.specificity, m.auc);
  return text;
}

// The model's output for `x` and the loss against `y`, both moved to `device`.
double forward_loss(nn::Module& model, nn::SoftmaxCrossEntropy& loss, const data::Batch& batch,
                    const Device& device, Tensor* logits) {
  *logits = model.forward(batch.x.to(device));
  return double(loss.forward(*logits, batch.y.to(device)));
}

}  // namespace

Datasets make_datasets(const TrainOptions& o) {
  Datasets d;
  if (o.data.source == "synthetic") {
    data::SyntheticOptions s;
    s.classes = o.classes;
    s.channels = o.in_channels;
    s.size = Shape{o.input[0], o.input[1], o.input[2]};
    s.seed = o.seed;
    s.samples = o.data.train_samples;
    d.train = std::make_unique<data::SyntheticDataset>(s);
    s.samples = o.data.val_samples;
    s.first_index = kSyntheticValidationFirstId;
    d.val = std::make_unique<data::SyntheticDataset>(s);
    return d;
  }
  // A manifest: its own train / val split when it has one (test rows are left out), else a
  // seeded share of val_fraction of the rows for validation.
  const data::Manifest all = data::read_manifest(o.data.source);
  data::Manifest train{all.source, {}}, val{all.source, {}};
  const bool has_split = std::any_of(all.rows.begin(), all.rows.end(),
                                     [](const data::ManifestRow& r) { return r.split != data::Split::unassigned; });
  if (has_split) {
    for (const auto& r : all.rows) {
      if (r.split == data::Split::val) val.rows.push_back(r);
      else if (r.split != data::Split::test) train.rows.push_back(r);
    }
  } else {
    const auto order = data::epoch_order(int64_t(all.rows.size()), o.seed, -2);
    const auto n_val = int64_t(std::llround(o.data.val_fraction * double(all.rows.size())));
    for (size_t i = 0; i < order.size(); ++i)
      (int64_t(i) < n_val ? val : train).rows.push_back(all.rows[size_t(order[i])]);
  }
  GRIDNN_REQUIRE(!train.rows.empty() && !val.rows.empty(), o.data.source, ": need training and validation rows, got ",
                 train.rows.size(), " and ", val.rows.size(),
                 "; give rows the split 'val', or set --val-fraction between 0 and 1");
  data::NiftiDatasetOptions no;
  no.target = {o.input[0], o.input[1], o.input[2]};
  no.fit = data::parse_fit(o.data.fit);
  no.num_classes = o.classes;
  d.train = std::make_unique<data::NiftiDataset>(std::move(train), no);
  d.val = std::make_unique<data::NiftiDataset>(std::move(val), no);
  return d;
}

Trainer::Trainer(TrainOptions options, std::FILE* out)
    : options_(std::move(options)), out_(out), device_(Device::parse(options_.device)) {
  validate(options_);
  require_device(device_);
  data_ = make_datasets(options_);
  GRIDNN_REQUIRE(data_.train->sample_shape() == sample_shape(options_), "--data: samples are ",
                 data_.train->sample_shape().str(), " but the model expects ", sample_shape(options_).str(),
                 " (--in-channels, --input)");

  model_ = build_model(options_);
  if (!options_.init_from.empty())
    load_model_tensors(*model_, read_weights(options_.init_from), options_.init_from);
  model_->to(device_);
  apply_precision(*model_, options_);
  model_->train();
  optimizer_ = optim::make_optimizer(options_.optimizer, model_->named_parameters());

  data::LoaderOptions lo;
  lo.batch = options_.batch;
  lo.seed = options_.seed;
  lo.augment = options_.data.augment;
  loader_ = std::make_unique<data::BatchLoader>(*data_.train, lo);
  total_steps_ = options_.steps > 0 ? options_.steps : options_.epochs * loader_->batches_per_epoch();
  optim::ScheduleOptions so = options_.schedule;
  if (so.total_steps == 0) so.total_steps = total_steps_;
  schedule_ = std::make_unique<optim::LrSchedule>(so);

  state_.seed = options_.seed;
  state_.config_json = to_json(options_);
  if (options_.resume) {
    if (auto c = latest_checkpoint(options_.checkpoint_dir)) {
      restore(*c);
      std::fprintf(out_, "resumed from %s at step %lld\n", c->path.c_str(), static_cast<long long>(state_.step));
    } else {
      std::fprintf(out_, "no checkpoint in %s: starting from scratch\n", options_.checkpoint_dir.c_str());
    }
  }
  if (!options_.metrics_path.empty()) {
    metrics_.open(options_.metrics_path, state_.step > 0 ? std::ios::app : std::ios::trunc);
    GRIDNN_REQUIRE(metrics_.good(), "--metrics: cannot open '", options_.metrics_path, "' for writing");
  }
}

void Trainer::restore(const Checkpoint& c) {
  const TrainOptions saved = options_from_json(c.state.config_json);
  GRIDNN_REQUIRE(saved.model == options_.model && saved.seed == options_.seed && saved.batch == options_.batch,
                 c.path, " was written by a run with --model ", saved.model, " --seed ", saved.seed,
                 " --batch ", saved.batch, "; resume with the same options or use another --checkpoint-dir");
  load_model_tensors(*model_, c.model, c.path);
  optimizer_->load_state(c.optimizer, c.optimizer_steps);
  state_.step = c.state.step;
  state_.epoch = c.state.epoch;
  state_.batch = c.state.batch;
  loader_->seek({c.state.epoch, c.state.batch});
}

std::string Trainer::save() {
  GRIDNN_REQUIRE(!options_.checkpoint_dir.empty(), "saving a checkpoint needs --checkpoint-dir");
  return save_checkpoint(options_.checkpoint_dir, *model_, *optimizer_, state_, options_.keep_checkpoints);
}

void Trainer::log_json(const std::string& line) {
  if (!metrics_.is_open()) return;
  metrics_ << line << '\n';
  metrics_.flush();
}

double Trainer::train_step(const data::Batch& batch) {
  Tensor logits;
  const double loss = forward_loss(*model_, loss_, batch, device_, &logits);
  if (!std::isfinite(loss))
    throw Error("the loss became " + std::to_string(loss) + " at step " + std::to_string(state_.step + 1) +
                " (epoch " + std::to_string(state_.epoch) +
                "); lower --lr or check the data. Checkpoints already saved are untouched");
  model_->zero_grad();
  model_->backward(loss_.backward());
  optimizer_->step(schedule_->lr(state_.step));
  return loss;
}

Metrics Trainer::evaluate() {
  model_->eval();
  data::LoaderOptions lo;
  lo.batch = options_.batch;
  lo.shuffle = false;
  lo.drop_last = false;
  lo.prefetch = true;
  data::BatchLoader loader(*data_.val, lo);
  MetricsAccumulator acc;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    data::Batch batch = loader.next();
    Tensor logits;
    forward_loss(*model_, loss_, batch, device_, &logits);
    acc.add(logits, batch.y, loss_.loss_sum());
  }
  model_->train();
  return acc.result();
}

Metrics Trainer::run(int64_t stop_at_step) {
  const int64_t end = stop_at_step >= 0 ? std::min(stop_at_step, total_steps_) : total_steps_;
  Progress progress(out_, total_steps_, options_.progress);
  std::fprintf(out_, "training %s on %s, %lld steps of batch %lld (%lld per epoch), %s\n",
               options_.model == "resattnet3d" ? describe(static_cast<nn::ResAttNet3D&>(*model_).config()).c_str()
                                                : "MLP",
               device_.str().c_str(), static_cast<long long>(total_steps_), static_cast<long long>(options_.batch),
               static_cast<long long>(loader_->batches_per_epoch()), options_.optimizer.kind.c_str());
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Metrics last;
  bool evaluated_now = false;
  while (state_.step < end) {
    const double lr = schedule_->lr(state_.step);
    const data::Batch batch = loader_->next();
    const double loss = train_step(batch);
    ++state_.step;
    state_.epoch = loader_->position().epoch;
    state_.batch = loader_->position().batch;
    progress.step(state_.step, state_.epoch, loss, lr);
    log_json(Json{{"event", "train"}, {"step", state_.step}, {"epoch", state_.epoch}, {"loss", loss},
                  {"lr", lr}, {"seconds", seconds()}}.dump());

    const bool epoch_end = state_.batch == 0;
    evaluated_now = options_.eval_every > 0 ? state_.step % options_.eval_every == 0 : epoch_end;
    if (evaluated_now || state_.step == end) {
      last = evaluate();
      evaluated_now = true;
      progress.line("validation after step " + std::to_string(state_.step) + ": " + metrics_text(last));
      Json j = {{"event", "validation"}, {"step", state_.step}, {"epoch", state_.epoch}, {"seconds", seconds()}};
      j.update(metrics_json(last));
      log_json(j.dump());
    }
    const bool save_due = options_.save_every > 0 && state_.step % options_.save_every == 0;
    if (!options_.checkpoint_dir.empty() && (save_due || state_.step == end))
      progress.line("saved " + save());
  }
  if (!evaluated_now) last = evaluate();
  progress.finish();
  Json summary = {{"event", "done"}, {"step", state_.step}, {"seconds", seconds()}};
  summary.update(metrics_json(last));
  log_json(summary.dump());
  std::fprintf(out_, "%s\n", summary.dump().c_str());
  return last;
}

void dump_step(const TrainOptions& options, const std::string& batch_file, const std::string& out_file) {
  const Device device = Device::parse(options.device);
  require_device(device);
  std::unique_ptr<nn::Module> model = build_model(options);
  if (!options.init_from.empty())
    load_model_tensors(*model, read_weights(options.init_from), options.init_from);
  model->to(device);
  apply_precision(*model, options);
  model->train();

  SafetensorsFile in = load_safetensors(batch_file);
  GRIDNN_REQUIRE(in.tensors.count("x") && in.tensors.count("y"), batch_file,
                 ": needs tensors 'x' (f32 [B, C, D, H, W]) and 'y' (i64 [B])");
  data::Batch batch;
  batch.x = in.tensors.at("x");
  batch.y = in.tensors.at("y");
  GRIDNN_REQUIRE(batch.x.dtype() == DType::f32 && batch.x.rank() == 5 && batch.y.dtype() == DType::i64 &&
                     batch.y.rank() == 1 && batch.y.size(0) == batch.x.size(0),
                 batch_file, ": x must be f32 [B, C, D, H, W] and y i64 [B], got x ", batch.x.str(), " and y ",
                 batch.y.str());

  auto optimizer = optim::make_optimizer(options.optimizer, model->named_parameters());
  nn::SoftmaxCrossEntropy loss;
  Tensor logits;
  const double value = forward_loss(*model, loss, batch, device, &logits);
  model->zero_grad();
  model->backward(loss.backward());

  NamedTensors out;
  out.emplace_back("logits", logits.to_host());
  out.emplace_back("loss", Tensor::from_vector(std::vector<float>{float(value)}, Shape{}));
  for (auto& [name, p] : model->named_parameters()) out.emplace_back("grad." + name, p->grad.to_host());
  optimizer->step(optim::LrSchedule(options.schedule).lr(0));
  for (auto& [name, t] : model_tensors(*model)) out.emplace_back(name, t.to_host());
  save_safetensors(out_file, out, {{"producer", "gridnn-train --dump-step"}, {"config", to_json(options)}});
}

}  // namespace gridnn::train
