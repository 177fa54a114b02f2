// Learning-rate schedules, evaluated per optimizer step (not per epoch).
//
//   lr(step), step = 0, 1, ... the index of the update about to run:
//   warm-up: for step < warmup_steps, base_lr * (step + 1) / warmup_steps
//   then, with s = step - warmup_steps and T = total_steps - warmup_steps:
//   constant  base_lr
//   step      base_lr * gamma^floor(s / step_size)
//   cosine    min_lr + (base_lr - min_lr) * (1 + cos(pi * min(s, T) / T)) / 2
#pragma once

#include <cstdint>

#include "core/names.h"

namespace gridnn::optim {

enum class ScheduleKind { constant, step, cosine };
inline constexpr EnumName<ScheduleKind> kScheduleKindNames[] = {
    {ScheduleKind::constant, "constant"}, {ScheduleKind::step, "step"}, {ScheduleKind::cosine, "cosine"}};
constexpr EnumNames<ScheduleKind> enum_names(ScheduleKind) { return {"schedule", kScheduleKindNames}; }

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::constant;
  double base_lr = 0.01;
  int64_t warmup_steps = 0;
  int64_t step_size = 1000;  // step
  double gamma = 0.1;        // step
  int64_t total_steps = 0;   // cosine: the run's length in steps
  double min_lr = 0.0;       // cosine
};

class LrSchedule {
 public:
  // Checks the options (gridnn::Error naming the bad one).
  explicit LrSchedule(ScheduleOptions options);
  double lr(int64_t step) const;
  const ScheduleOptions& options() const { return options_; }

 private:
  ScheduleOptions options_;
};

}  // namespace gridnn::optim
