#include "kernels/algo_fallback.h"

#include "core/error.h"

namespace gridnn::kernels {

AlgoFallback::AlgoFallback(std::string what, std::vector<AlgoCandidate> ranked, AlgoStatusRules rules, Log log)
    : what_(std::move(what)), ranked_(std::move(ranked)), rules_(std::move(rules)), log_(std::move(log)) {
  GRIDNN_REQUIRE(!ranked_.empty(), what_, ": no candidate algorithm to run");
}

void AlgoFallback::confirm() {
  confirmed_ = true;
  if (log_.chosen)
    log_.chosen(what_ + ": " + current().name + ", candidate " + std::to_string(index_ + 1) + " of " +
                std::to_string(ranked_.size()));
}

void AlgoFallback::reject(int status) {
  const std::string failed = current().name + ": " + rules_.name(status);
  failures_.push_back(failed);
  if (index_ + 1 == ranked_.size()) exhausted();
  ++index_;
  if (log_.fallback)
    log_.fallback(what_ + ": " + failed + " at its first run; trying " + current().name + " (candidate " +
                  std::to_string(index_ + 1) + " of " + std::to_string(ranked_.size()) + ")");
}

void AlgoFallback::exhausted() const {
  std::string list;
  for (const std::string& f : failures_) list += (list.empty() ? "" : "; ") + f;
  throw Error(what_ + ": every candidate algorithm failed at its first run (" + list +
              "); try another math mode or batch size, or run this layer on the cpu");
}

}  // namespace gridnn::kernels
