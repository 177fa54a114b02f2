// The learning-rate schedules of models/optim/schedule.h.
#include "models/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace gridnn::optim {

constexpr double kPi = 3.14159265358979323846;

LrSchedule::LrSchedule(ScheduleOptions options) : options_(options) {
  const ScheduleOptions& o = options_;
  GRIDNN_REQUIRE(std::isfinite(o.base_lr) && o.base_lr >= 0.0, "LrSchedule: base_lr must be finite and >= 0, got ",
                 o.base_lr);
  GRIDNN_REQUIRE(o.warmup_steps >= 0, "LrSchedule: warmup_steps must be >= 0, got ", o.warmup_steps);
  if (o.kind == ScheduleKind::step) {
    GRIDNN_REQUIRE(o.step_size > 0, "LrSchedule: step_size must be > 0, got ", o.step_size);
    GRIDNN_REQUIRE(std::isfinite(o.gamma) && o.gamma > 0.0, "LrSchedule: gamma must be finite and > 0, got ", o.gamma);
  }
  if (o.kind == ScheduleKind::cosine) {
    GRIDNN_REQUIRE(o.total_steps > o.warmup_steps, "LrSchedule: cosine needs total_steps (the run's length, ",
                   o.total_steps, ") > warmup_steps (", o.warmup_steps, ")");
    GRIDNN_REQUIRE(o.min_lr >= 0.0 && o.min_lr <= o.base_lr, "LrSchedule: min_lr must be in [0, base_lr = ", o.base_lr,
                   "], got ", o.min_lr);
  }
}

double LrSchedule::lr(int64_t step) const {
  const ScheduleOptions& o = options_;
  GRIDNN_REQUIRE(step >= 0, "LrSchedule: step must be >= 0, got ", step);
  if (step < o.warmup_steps) return o.base_lr * double(step + 1) / double(o.warmup_steps);
  const int64_t s = step - o.warmup_steps;
  const int64_t decays = s / o.step_size;  // whole steps of step_size so far
  if (o.kind == ScheduleKind::step) return o.base_lr * std::pow(o.gamma, double(decays));
  if (o.kind == ScheduleKind::cosine) {
    const double total = double(o.total_steps - o.warmup_steps);
    const double progress = double(std::min<int64_t>(s, o.total_steps - o.warmup_steps)) / total;
    return o.min_lr + (o.base_lr - o.min_lr) * (1.0 + std::cos(kPi * progress)) / 2.0;
  }
  return o.base_lr;
}

}  // namespace gridnn::optim
