// Where a training step's time goes, by kind of work and by layer: gridnn-train --profile.
//
//   Profiler profiler(device);                   // off until installed
//   { ProfilerScope on(profiler); ...steps... }   // installed on this thread
//   ProfileScope scope(ProfileKind::convolution);  // in a kernel: a no-op when off
//   ProfileScope scope(ProfileKind::convolution, name(), ProfilePass::forward);  // in a layer
//
// Each scope's time is exclusive: a scope opened inside another (a reorder inside a
// convolution, a gradient bucket started inside a layer's backward) counts for its own kind
// only, and the outer scope's kind gets the rest. A scope that names its layer also counts
// for that layer's pass, and so do the unnamed scopes inside it, except those of the step's
// own kinds (gradient sync, optimizer, data), which belong to no layer. Time outside every scope is the caller's
// to name (the trainer reports it as "other": losses, residual adds, linear layers, the
// step's bookkeeping). Only the installing thread is profiled; the loader's background
// thread shows as the "data" wait on it. On a GPU each scope boundary synchronizes the
// device, so that kernels count where they are queued; that slows the step (CPU: two clock
// reads per scope).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/names.h"

namespace gridnn {

enum class ProfileKind { convolution, reorder, batchnorm_relu, pooling, attention, optimizer, gradient_sync, data };
inline constexpr EnumName<ProfileKind> kProfileKindNames[] = {
    {ProfileKind::convolution, "convolution", "conv3d passes (oneDNN, vol2col + GEMM or cuDNN), halo exchange"},
    {ProfileKind::reorder, "reorder",
     "copies to and from oneDNN's blocked layouts, and between the grid's depth slabs and batch shards"},
    {ProfileKind::batchnorm_relu, "batchnorm_relu", "batch norm (fused with its ReLU or not) and ReLU"},
    {ProfileKind::pooling, "pooling", "max, average and global pooling"},
    {ProfileKind::attention, "attention", "self-attention blocks"},
    {ProfileKind::optimizer, "optimizer", "the parameter update"},
    {ProfileKind::gradient_sync, "gradient_sync", "gradient buckets: starting, all-reduce, waiting"},
    {ProfileKind::data, "data", "waiting for the next batch"}};
constexpr EnumNames<ProfileKind> enum_names(ProfileKind) { return {"profile kind", kProfileKindNames}; }
constexpr size_t kProfileKinds = std::size(kProfileKindNames);

// The step's own kinds: their time belongs to no layer, even inside a layer's scope.
constexpr bool is_step_kind(ProfileKind k) {
  return k == ProfileKind::gradient_sync || k == ProfileKind::optimizer || k == ProfileKind::data;
}

enum class ProfilePass { forward, backward };

// One layer's exclusive seconds in each pass.
struct LayerSeconds {
  std::string layer;
  double forward = 0, backward = 0;
};

class Profiler {
 public:
  explicit Profiler(Device device = Device::cpu()) : device_(device) {}
  // Exclusive seconds by kind (index: size_t(kind)) since construction or reset().
  const std::array<double, kProfileKinds>& seconds() const { return seconds_; }
  // The layers' seconds, in the order they were first timed (a forward pass's order).
  const std::vector<LayerSeconds>& layers() const { return layers_; }
  void reset();
  // A table of the kinds' seconds per step and shares of `total_seconds` (the time the
  // profiled steps took, `steps` of them); the rest of it is "other".
  std::string table(double total_seconds, int64_t steps) const;
  // The profiler installed on this thread, or null.
  static Profiler* current();

 private:
  friend class ProfileScope;
  void add_layer(const std::string& layer, ProfilePass pass, double seconds);

  Device device_;
  std::array<double, kProfileKinds> seconds_{};
  std::vector<LayerSeconds> layers_;
  std::unordered_map<std::string, size_t> layer_index_;  // into layers_
};

// Installs `profiler` on this thread for the scope's lifetime (the previous one after).
class ProfilerScope {
 public:
  explicit ProfilerScope(Profiler& profiler);
  ~ProfilerScope();
  ProfilerScope(const ProfilerScope&) = delete;
  ProfilerScope& operator=(const ProfilerScope&) = delete;

 private:
  Profiler* previous_;
};

// Times its lifetime as `kind` on this thread's profiler (nothing without one).
class ProfileScope {
 public:
  explicit ProfileScope(ProfileKind kind);
  // The scope of `layer`'s `pass` (the string must outlive the scope: a module's name).
  ProfileScope(ProfileKind kind, const std::string& layer, ProfilePass pass);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  Profiler* profiler_;
  ProfileKind kind_;
  const std::string* layer_ = nullptr;
  ProfilePass pass_ = ProfilePass::forward;
  ProfileScope* outer_ = nullptr;
  Clock::time_point start_;
  double inner_seconds_ = 0;  // of the scopes opened inside this one
};

}  // namespace gridnn
