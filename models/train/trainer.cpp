// The training loop and single-step mode (see trainer.h).
#include "models/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/profile.h"
#include "core/stop_signal.h"
#include "core/transfers.h"
#include "models/run/grid_batch.h"
#include "models/run/layer_profile.h"
#include "models/run/memory_limit.h"
#include "parallel/progress_board.h"

namespace gridnn::train {

namespace fs = std::filesystem;

namespace {

using Json = nlohmann::ordered_json;

Shape sample_shape(const TrainOptions& o) { return {o.in_channels, o.input[0], o.input[1], o.input[2]}; }

// Checks the loss of `step` (every rank computed it alike: it is summed over the grid first).
void require_finite(double loss, int64_t step, int64_t epoch) {
  if (!std::isfinite(loss))
    throw Error("the loss became " + std::to_string(loss) + " at step " + std::to_string(step) + " (epoch " +
                std::to_string(epoch) + "); lower --lr or check the data. Checkpoints already saved are untouched");
}

}  // namespace

Trainer::Trainer(TrainOptions options, std::FILE* out, parallel::ProcessGrid* grid) : options_(std::move(options)) {
  validate(options_);
  if (!grid) {
    own_grid_ = parallel::ProcessGrid::single();
    grid = own_grid_.get();
  }
  grid_ = grid;
  leader_ = grid_->world_rank() == 0;
  // Only the first rank reports; the others compute the same numbers.
  out_ = leader_ ? out : nullptr;
  if (!out_) options_.progress = false;

  data_ = make_datasets(options_);
  GRIDNN_REQUIRE(data_.train->sample_shape() == sample_shape(options_), "--data: samples are ",
                 data_.train->sample_shape().str(), " but the model expects ", sample_shape(options_).str(),
                 " (--in-channels, --input)");
  shard_ = run::batch_shard(*grid_, options_.batch, options_.input[0]);
  model_ = std::make_unique<run::PipelinedModel>(options_, *grid_);
  // Before the loader starts and before anything is written (docs/design.md §6a); a resumed
  // checkpoint is read at setup.
  const std::string restored = options_.resume ? newest_checkpoint_path(options_.checkpoint_dir) : std::string();
  predicted_memory_ = plan::simulate_memory(model_->memory_step(options_, restored));
  run::enforce_memory_limit(options_, *model_, *grid_, predicted_memory_);

  state_.seed = options_.seed;
  state_.grid = grid_->shape().str();
  state_.config_json = to_json(options_);
  if (options_.resume) {  // before the loader, which then starts at the checkpoint's batch
    if (auto c = latest_checkpoint(options_.checkpoint_dir)) {
      restore(*c);
      say("resumed from " + c->path + " at step " + std::to_string(state_.step));
    } else {
      say("no checkpoint in " + options_.checkpoint_dir + ": starting from scratch");
    }
  }

  data::LoaderOptions lo;
  lo.batch = options_.batch;
  lo.seed = options_.seed;
  lo.augment = options_.data.augment;
  lo.cache = options_.data.cache;
  loader_ = std::make_unique<data::BatchLoader>(*data_.train, run::shard_loader(lo, shard_),
                                                data::LoaderPosition{state_.epoch, state_.batch});
  total_steps_ = options_.steps > 0 ? options_.steps : options_.epochs * loader_->batches_per_epoch();
  optim::ScheduleOptions so = options_.schedule;
  if (so.total_steps == 0) so.total_steps = total_steps_;
  schedule_ = std::make_unique<optim::LrSchedule>(so);
  if (!options_.metrics_path.empty() && leader_) {
    // Its folder is made as the checkpoint folder is (a job's metrics often sit beside its
    // checkpoints, before the first one is saved).
    const fs::path folder = fs::path(options_.metrics_path).parent_path();
    std::error_code ec;
    if (!folder.empty()) fs::create_directories(folder, ec);
    GRIDNN_REQUIRE(!ec, "--metrics: cannot create the folder '", folder.string(), "': ", ec.message());
    metrics_.open(options_.metrics_path, state_.step > 0 ? std::ios::app : std::ios::trunc);
    GRIDNN_REQUIRE(metrics_.good(), "--metrics: cannot open '", options_.metrics_path, "' for writing");
  }
}

Trainer::~Trainer() = default;

nn::Module& Trainer::model() { return model_->model(); }
NamedTensors Trainer::whole_model_tensors() { return model_->model_state(); }
optim::Optimizer& Trainer::optimizer() { return model_->optimizer(); }

void Trainer::say(const std::string& line) {
  if (out_) std::fprintf(out_, "%s\n", line.c_str());
}

void Trainer::restore(const Checkpoint& c) {
  const TrainOptions saved = options_from_json(c.state.config_json);
  GRIDNN_REQUIRE(saved.model == options_.model && saved.seed == options_.seed && saved.batch == options_.batch, c.path,
                 " was written by a run with --model ", enum_name(saved.model), " --seed ", saved.seed, " --batch ",
                 saved.batch, "; resume with the same options or use another --checkpoint-dir");
  GRIDNN_REQUIRE(saved.data.orientation == options_.data.orientation && saved.data.spacing == options_.data.spacing,
                 c.path, " was written by a run that read its volumes with --orientation ",
                 enum_name(saved.data.orientation), " --spacing ", saved.data.spacing,
                 "; resume with those (the network learnt that voxel order)");
  model_->load_state_dict({NamedTensors(c.model.begin(), c.model.end()),
                           NamedTensors(c.optimizer.begin(), c.optimizer.end()), c.optimizer_steps},
                          c.path);
  state_.step = c.state.step;
  state_.epoch = c.state.epoch;
  state_.batch = c.state.batch;
}

std::string Trainer::save() {
  GRIDNN_REQUIRE(!options_.checkpoint_dir.empty(), "saving a checkpoint needs --checkpoint-dir");
  // Every tensor is whole on every rank (replicated; pipeline stages exchange theirs first),
  // so the first rank writes alone; the others wait, so that no rank runs ahead of a
  // checkpoint that may yet fail.
  const run::TrainingState s = model_->state_dict();
  int32_t saved = 1;
  if (leader_) {
    try {
      save_checkpoint(options_.checkpoint_dir, s.model, s.optimizer, s.optimizer_steps, state_,
                      options_.keep_checkpoints);
    } catch (const Error& e) {
      const std::string why = "could not save the checkpoint of step " + std::to_string(state_.step) + ": " + e.what() +
                              ". The checkpoints saved before are untouched";
      if (options_.save_errors == SaveErrors::stop)
        throw Error(why +
                    "; free space or fix --checkpoint-dir, then resume with --resume (or pass "
                    "--save-errors warn to train on without it)");
      std::fprintf(stderr, "gridnn: warning: %s; training goes on (--save-errors warn)\n", why.c_str());
      std::fflush(stderr);
      saved = 0;
    }
  }
  // Every rank learns whether it worked (and none runs ahead of a save that may yet fail).
  Tensor flag = Tensor::from_vector(std::vector<int32_t>{saved}, Shape{1});
  grid_->world().broadcast(flag, 0);
  return *static_cast<const int32_t*>(flag.raw()) ? checkpoint_path(options_.checkpoint_dir, state_.step) : "";
}

std::pair<int, int> Trainer::agree_on_stop() {
  const int signal = stop_signal();
  Tensor flags = Tensor::from_vector(std::vector<int32_t>{signal, signal ? grid_->world_rank() : -1}, Shape{2});
  parallel::CommLayerScope scope("stop signal");
  grid_->world().all_reduce(flags, parallel::ReduceOp::max);
  const int32_t* v = static_cast<const int32_t*>(flags.raw());
  return {v[0], v[1]};
}

void Trainer::log_json(const std::string& line) {
  if (!metrics_.is_open()) return;
  metrics_ << line << '\n';
  metrics_.flush();
}

void Trainer::report_memory(bool at_end) {
  const bool report = at_end && options_.memory_report;
  if (options_.metrics_path.empty() && !report) return;  // the same on every rank: no collective
  const std::vector<int64_t> predicted = run::per_rank(*grid_, predicted_memory_.peak_bytes);
  const std::vector<int64_t> measured = run::per_rank(*grid_, run::measured_peak_bytes(model_->device()));
  for (size_t r = 0; r < predicted.size(); ++r)
    log_json(Json{{"event", "memory"},
                  {"when", at_end ? "end" : "first step"},
                  {"step", state_.step},
                  {"rank", r},
                  {"predicted_peak_bytes", predicted[r]},
                  {"measured_peak_bytes", measured[r]}}
                 .dump());
  if (!report) return;
  // Each rank's block, with its holders, from its own prediction.
  const int rank = grid_->world_rank();
  const std::vector<std::string> blocks =
      run::per_rank(*grid_, run::memory_report(rank, predicted_memory_, measured[size_t(rank)]));
  if (!out_) return;
  std::string text = run::memory_report_title(model_->device());
  for (const std::string& block : blocks) text += block;
  say(text.substr(0, text.size() - 1));
}

Tensor Trainer::train_step(const data::Batch& shard) {
  const TransferCounts before = transfer_counts();
  Tensor logits;
  Tensor loss = model_->forward_backward(shard, options_.batch, &logits);
  model_->update(schedule_->lr(state_.step));
  step_transfers_ += transfer_counts().since(before);
  return loss;
}

void Trainer::keep_loss(const Tensor& loss, double lr, double seconds) {
  if (!unread_losses_.defined() || unread_losses_.device() != loss.device())
    unread_losses_ = Tensor::empty({options_.log_every}, DType::f32, loss.device());
  const int64_t k = int64_t(unread_.size());
  unread_losses_.narrow(k, 1).copy_from(loss);  // on the device
  unread_.push_back({state_.step, state_.epoch, lr, seconds});
}

void Trainer::read_losses(Progress& progress, bool wait) {
  report_losses(progress);  // the interval before, copied while this one ran
  if (!unread_.empty()) {
    readback_.start(unread_losses_.narrow(0, int64_t(unread_.size())));
    in_flight_ = std::move(unread_);
    unread_.clear();
  }
  if (wait) report_losses(progress);
}

void Trainer::report_losses(Progress& progress) {
  if (in_flight_.empty()) return;
  const Tensor host = readback_.finish();
  const float* losses = host.data<float>();
  const std::vector<UnreadLoss> steps = std::move(in_flight_);
  in_flight_.clear();
  for (size_t i = 0; i < steps.size(); ++i) {
    const UnreadLoss& u = steps[i];
    require_finite(double(losses[i]), u.step, u.epoch);
    progress.step(u.step, u.epoch, double(losses[i]), u.lr);
    log_json(Json{{"event", "train"},
                  {"step", u.step},
                  {"epoch", u.epoch},
                  {"loss", double(losses[i])},
                  {"lr", u.lr},
                  {"seconds", u.seconds}}
                 .dump());
  }
}

run::Metrics Trainer::evaluate() {
  data::LoaderOptions lo;
  lo.batch = options_.batch;
  lo.shuffle = false;
  lo.drop_last = false;
  lo.one_epoch = true;
  data::BatchLoader loader(*data_.val, run::shard_loader(lo, shard_));
  run::MetricsAccumulator acc;
  parallel::CommLayerScope scope("validation");
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    data::Batch batch = loader.next();
    Tensor logits;
    const double loss_sum = run::sum_over_batch(*grid_, model_->evaluate(batch, &logits));
    // Every rank gathers the whole batch's logits and labels and computes the same metrics.
    acc.add(run::gather_rows(*grid_, logits.to_host()), run::gather_rows(*grid_, batch.y), loss_sum);
  }
  return acc.result();
}

run::Metrics Trainer::run(int64_t stop_at_step) {
  const int64_t end = stop_at_step >= 0 ? std::min(stop_at_step, total_steps_) : total_steps_;
  Progress progress(out_ ? out_ : stdout, total_steps_, options_.progress);
  if (out_) {
    const std::string network =
        options_.model == run::Model::resattnet3d ? describe(static_cast<nn::ResAttNet3D&>(model()).config()) : "MLP";
    std::fprintf(out_, "training %s on %s, grid %s, %lld steps of batch %lld (%lld per epoch), %s\n", network.c_str(),
                 model_->device().str().c_str(), grid_->shape().str().c_str(), static_cast<long long>(total_steps_),
                 static_cast<long long>(options_.batch), static_cast<long long>(loader_->batches_per_epoch()),
                 enum_name(options_.optimizer.kind));
  }
  if (out_ && (model_->stages() > 1 || model_->micro_batches() > 1))
    std::fprintf(out_, "pipeline, %d micro-batches: %s\n", model_->micro_batches(), model_->describe_stages().c_str());
  const auto start = std::chrono::steady_clock::now();
  const TransferCounts run_start = transfer_counts();
  step_transfers_ = TransferCounts();
  const int64_t first_step = state_.step;
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  run::Metrics last;
  bool evaluated_now = false;
  // --profile: every step after this run's first (which builds plans and grows buffers).
  Profiler profiler(model_->device());
  double profiled_seconds = 0;
  int64_t profiled_steps = 0;
  std::map<std::string, double> profiled_comm;  // seconds by layer
  while (state_.step < end) {
    parallel::set_progress_step(state_.step + 1);
    const double lr = schedule_->lr(state_.step);
    const bool profiled = options_.profile && state_.step > first_step;
    const auto step_start = std::chrono::steady_clock::now();
    std::optional<ProfilerScope> on;
    if (profiled) on.emplace(profiler);
    const size_t comm_before = parallel::comm_log().records().size();
    const data::Batch batch = [&] {
      const ProfileScope profile(ProfileKind::data);
      return loader_->next();
    }();
    const Tensor loss = train_step(batch);
    if (profiled) {
      synchronize(model_->device());
      on.reset();
      profiled_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      ++profiled_steps;
      run::add_comm_seconds(comm_before, profiled_comm);
    }
    ++state_.step;
    if (state_.step == first_step + 1) report_memory(false);
    state_.epoch = loader_->position().epoch;
    state_.batch = loader_->position().batch;
    // The loss stays on the device: each interval of --log-every steps is copied to the host
    // while the next one runs and reported then; before validation, a checkpoint or a stop
    // every loss so far is read, so a loss that is not finite is never saved.
    keep_loss(loss, lr, seconds());
    if (int64_t(unread_.size()) == options_.log_every) read_losses(progress, /*wait=*/false);

    if (const auto [signal, rank] = agree_on_stop(); signal != 0) {
      read_losses(progress, /*wait=*/true);
      stop_.signal = signal;
      std::string what = std::string(stop_signal_name(signal)) + " reached rank " + std::to_string(rank) +
                         (grid_->shape().size() > 1 ? " (and perhaps others)" : "") + ": stopped after step " +
                         std::to_string(state_.step);
      if (options_.on_signal == OnSignal::save_exit && !options_.checkpoint_dir.empty()) {
        stop_.checkpoint = save();
        what += stop_.checkpoint.empty() ? "; the checkpoint could not be saved"
                                         : "; saved " + stop_.checkpoint + " (continue with --resume)";
      } else {
        what += options_.checkpoint_dir.empty() ? "; nothing saved (no --checkpoint-dir)"
                                                : "; nothing saved (--on-signal exit)";
      }
      if (out_) progress.line(what);
      log_json(Json{{"event", "stopped"},
                    {"signal", stop_signal_name(signal)},
                    {"step", state_.step},
                    {"checkpoint", stop_.checkpoint},
                    {"seconds", seconds()}}
                   .dump());
      progress.finish();
      return last;
    }

    const bool epoch_end = state_.batch == 0;
    evaluated_now = options_.eval_every > 0 ? state_.step % options_.eval_every == 0 : epoch_end;
    const bool save_due = options_.save_every > 0 && state_.step % options_.save_every == 0;
    if (evaluated_now || state_.step == end || save_due) read_losses(progress, /*wait=*/true);
    if (evaluated_now || state_.step == end) {
      last = evaluate();
      evaluated_now = true;
      if (out_) progress.line("validation after step " + std::to_string(state_.step) + ": " + run::metrics_text(last));
      Json j = {{"event", "validation"}, {"step", state_.step}, {"epoch", state_.epoch}, {"seconds", seconds()}};
      j.update(run::metrics_json(last));
      log_json(j.dump());
    }
    if (!options_.checkpoint_dir.empty() && (save_due || state_.step == end)) {
      const std::string path = save();
      if (out_ && !path.empty()) progress.line("saved " + path);
    }
  }
  read_losses(progress, /*wait=*/true);
  if (!evaluated_now) last = evaluate();
  progress.finish();
  Json summary = {{"event", "done"}, {"step", state_.step}, {"seconds", seconds()}};
  summary.update(run::metrics_json(last));
  log_json(summary.dump());
  say(summary.dump());
  report_memory(true);
  if (options_.profile && profiled_steps > 0) {
    say("time per step by kind of work, rank 0, the " + std::to_string(profiled_steps) +
        " steps after the first (core/profile.h):\n" + profiler.table(profiled_seconds, profiled_steps));
    const std::string layers =
        run::layer_profile_table(*grid_, profiler, profiled_comm, profiled_seconds, profiled_steps);
    say("ms per step by layer, every rank (models/run/layer_profile.h):\n" + layers.substr(0, layers.size() - 1));
    Json by_kind = Json::object();
    for (const EnumName<ProfileKind>& k : kProfileKindNames) by_kind[k.name] = profiler.seconds()[size_t(k.value)];
    log_json(
        Json{{"event", "profile"}, {"steps", profiled_steps}, {"step_seconds", profiled_seconds}, {"seconds", by_kind}}
            .dump());
  }
  if (options_.comm_report) {
    say(parallel::comm_log().report());
    // docs/design.md §2: a step moves its batch up and nothing down; the losses are read
    // once per --log-every steps, outside the steps.
    say("host<->device copies in " + std::to_string(state_.step - first_step) +
        " training steps: " + step_transfers_.str());
    TransferCounts elsewhere = transfer_counts().since(run_start);
    elsewhere = elsewhere.since(step_transfers_);
    say("host<->device copies outside them (loss reads, validation, checkpoints): " + elsewhere.str());
  }
  return last;
}

void dump_step(const TrainOptions& options, const std::string& batch_file, const std::string& out_file,
               parallel::ProcessGrid* grid) {
  std::unique_ptr<parallel::ProcessGrid> own;
  if (!grid) {
    own = parallel::ProcessGrid::single();
    grid = own.get();
  }
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
  TrainOptions o = options;
  o.steps = 1;
  o.batch = batch.x.size(0);
  o.in_channels = batch.x.size(1);
  o.input = {batch.x.size(2), batch.x.size(3), batch.x.size(4)};
  validate(o);

  run::PipelinedModel model(o, *grid);
  const run::BatchShard shard = run::batch_shard(*grid, o.batch, o.input[0]);
  Tensor logits;
  const Tensor loss = model.forward_backward(take_shard(batch, shard), o.batch, &logits);

  // The file the 1x1 run writes: the whole batch's logits, the summed gradients, and the
  // updated tensors (whole: gathered from pipeline stages and row blocks; the first rank
  // writes it).
  NamedTensors out;
  out.emplace_back("logits", run::gather_rows(*grid, logits.to_host()));
  out.emplace_back("loss", Tensor::from_vector(loss.to_vector<float>(), Shape{}));
  for (auto& [name, g] : model.gradients()) out.emplace_back("grad." + name, g.to_host());
  model.update(optim::LrSchedule(o.schedule).lr(0));
  for (auto& [name, t] : model.model_state()) out.emplace_back(name, t.to_host());
  if (grid->world_rank() == 0)
    save_safetensors(out_file, out,
                     {{"producer", "gridnn-train --dump-step"}, {"grid", grid->shape().str()}, {"config", to_json(o)}});
  grid->world().barrier();
}

}  // namespace gridnn::train
