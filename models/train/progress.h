// Progress output of a training run: a bar redrawn in place on a terminal, plain lines at
// a steady pace otherwise (logs, CI), and the validation results as lines of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gridnn::train {

class Progress {
 public:
  // `out`: where to print (stdout); `enabled` false: print nothing but lines().
  Progress(std::FILE* out, int64_t total_steps, bool enabled);
  // After step `step` (1-based) with its loss and learning rate.
  void step(int64_t step, int64_t epoch, double loss, double lr);
  // A line of its own (validation results, checkpoint saved); clears the bar first.
  void line(const std::string& text);
  void finish();

 private:
  std::FILE* out_;
  int64_t total_;
  bool enabled_, tty_;
  bool bar_shown_ = false;
  int64_t last_plain_step_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  double loss_avg_ = 0;
};

}  // namespace gridnn::train
