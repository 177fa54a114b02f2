// The step profiler (see profile.h).
#include "core/profile.h"

#include <cstdio>

namespace gridnn {

namespace {
thread_local Profiler* g_profiler = nullptr;
thread_local ProfileScope* g_innermost = nullptr;
}  // namespace

Profiler* Profiler::current() { return g_profiler; }

ProfilerScope::ProfilerScope(Profiler& profiler) : previous_(g_profiler) { g_profiler = &profiler; }
ProfilerScope::~ProfilerScope() { g_profiler = previous_; }

std::string Profiler::table(double total_seconds, int64_t steps) const {
  std::string out = "| kind | ms per step | share of the step |\n|---|--:|--:|\n";
  char line[128];
  double counted = 0;
  auto row = [&](const char* name, double s) {
    std::snprintf(line, sizeof line, "| %s | %.2f | %.1f%% |\n", name, 1e3 * s / double(steps),
                  total_seconds > 0 ? 100.0 * s / total_seconds : 0.0);
    out += line;
  };
  for (const EnumName<ProfileKind>& k : kProfileKindNames) {
    row(k.name, seconds_[size_t(k.value)]);
    counted += seconds_[size_t(k.value)];
  }
  row("other", total_seconds - counted);
  row("step", total_seconds);
  return out;
}

void Profiler::reset() {
  seconds_ = {};
  layers_.clear();
  layer_index_.clear();
}

void Profiler::add_layer(const std::string& layer, ProfilePass pass, double seconds) {
  auto [it, added] = layer_index_.emplace(layer, layers_.size());
  if (added) layers_.push_back(LayerSeconds{layer});
  LayerSeconds& l = layers_[it->second];
  (pass == ProfilePass::forward ? l.forward : l.backward) += seconds;
}

ProfileScope::ProfileScope(ProfileKind kind, const std::string& layer, ProfilePass pass) : ProfileScope(kind) {
  layer_ = &layer;
  pass_ = pass;
}

ProfileScope::ProfileScope(ProfileKind kind) : profiler_(g_profiler), kind_(kind) {
  if (!profiler_) return;
  synchronize(profiler_->device_);  // what was queued before belongs to the outer scope
  outer_ = g_innermost;
  g_innermost = this;
  start_ = Clock::now();
}

ProfileScope::~ProfileScope() {
  if (!profiler_) return;
  synchronize(profiler_->device_);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const double own = elapsed - inner_seconds_;
  profiler_->seconds_[size_t(kind_)] += own;
  const bool step_kind = is_step_kind(kind_);
  const ProfileScope* owner = this;
  while (!step_kind && owner && !owner->layer_) owner = owner->outer_;
  if (!step_kind && owner) profiler_->add_layer(*owner->layer_, owner->pass_, own);
  if (outer_) outer_->inner_seconds_ += elapsed;
  g_innermost = outer_;
}

}  // namespace gridnn
