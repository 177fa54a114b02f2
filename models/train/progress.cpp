// Progress: terminal bar or plain lines.
#include "models/train/progress.h"

#include <unistd.h>

#include <algorithm>

namespace gridnn::train {

Progress::Progress(std::FILE* out, int64_t total_steps, bool enabled)
    : out_(out),
      total_(std::max<int64_t>(total_steps, 1)),
      enabled_(enabled),
      tty_(enabled && ::isatty(::fileno(out))),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::step(int64_t step, int64_t epoch, double loss, double lr) {
  loss_avg_ = step == 1 ? loss : 0.9 * loss_avg_ + 0.1 * loss;  // smoothed for display
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double per_step = elapsed / double(step);
  const double eta = per_step * double(total_ - step);
  if (tty_) {
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30;
    const int filled = int(double(width) * double(step) / double(total_));
    std::fprintf(out_, "\r[%s%s] %lld/%lld  epoch %lld  loss %.4f  lr %.3g  %.2f s/step  eta %.0f s\x1b[K",
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
                 static_cast<long long>(step), static_cast<long long>(total_), static_cast<long long>(epoch), loss_avg_,
                 lr, per_step, eta);
    bar_shown_ = true;
  } else {
    // About twenty lines per run, and the first and last step.
    const int64_t every = std::max<int64_t>(total_ / 20, 1);
    if (step != 1 && step != total_ && step - last_plain_step_ < every) return;
    last_plain_step_ = step;
    std::fprintf(out_, "step %lld/%lld  epoch %lld  loss %.4f  lr %.3g  %.2f s/step  eta %.0f s\n",
                 static_cast<long long>(step), static_cast<long long>(total_), static_cast<long long>(epoch), loss_avg_,
                 lr, per_step, eta);
  }
  std::fflush(out_);
}

void Progress::line(const std::string& text) {
  if (bar_shown_) std::fprintf(out_, "\r\x1b[K");
  std::fprintf(out_, "%s\n", text.c_str());
  bar_shown_ = false;
  last_draw_ = {};  // redraw the bar at the next step
  std::fflush(out_);
}

void Progress::finish() {
  if (bar_shown_) std::fprintf(out_, "\n");
  bar_shown_ = false;
  std::fflush(out_);
}

}  // namespace gridnn::train
