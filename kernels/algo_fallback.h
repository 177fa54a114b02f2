// Running the first working algorithm of a library's ranked list (docs/design.md §3).
//
// cuDNN ranks a convolution's algorithms with heuristics that run nothing
// (cudnnGet*Algorithm_v7), and a candidate listed as usable can still fail when it first runs:
// NOT_SUPPORTED, BAD_PARAM, EXECUTION_FAILED, or a runtime-compiled engine that does not
// compile. An AlgoFallback holds the acceptable candidates of one plan direction in the
// library's order. Until one has run, a run whose status `retryable` accepts marks that
// candidate bad, logs a line naming it, the status and the next candidate, and runs the next
// one, as PyTorch does. The first candidate that runs is confirmed and kept: a later failure
// of it is returned to the caller like any error. When every candidate failed, run() throws
// gridnn::Error naming each one and its status.
//
//   AlgoFallback fwd(what, candidates, rules);
//   GRIDNN_CHECK_CUDNN(fwd.run([&](const AlgoCandidate& c) { return cudnnConvolutionForward(..., c.algo, ...); }));
//
// Plain C++, so the fallback is tested on the CPU (test/kernels/test_algo_fallback.cpp) with
// runs that fail on purpose; kernels/cuda/conv3d_cudnn.cpp supplies cuDNN's runs and rules.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gridnn::kernels {

struct AlgoCandidate {
  int algo = 0;          // the library's algorithm number
  int math = 0;          // the math type it runs with
  size_t workspace = 0;  // bytes of workspace it needs
  std::string name;      // for messages, e.g. "IMPLICIT_PRECOMP_GEMM (FMA math, 0 B workspace)"
};

// What a library's status codes mean to the fallback. Status 0 is success.
struct AlgoStatusRules {
  std::function<bool(int)> retryable;    // worth running the next candidate before confirmation
  std::function<std::string(int)> name;  // e.g. "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"
};

class AlgoFallback {
 public:
  // Where the lines go: `chosen` once per plan direction when its candidate is confirmed,
  // `fallback` once per candidate that failed its first run. Both default to nothing.
  struct Log {
    std::function<void(const std::string&)> chosen, fallback;
  };

  // `what` names the plan direction in messages ("cuDNN forward of 1->16 k7 s2 p3 on
  // 64x64x64, batch 8, fp32"). `ranked` must not be empty.
  AlgoFallback(std::string what, std::vector<AlgoCandidate> ranked, AlgoStatusRules rules, Log log = {});

  // Runs `attempt` (int(const AlgoCandidate&), 0 on success) on the current candidate,
  // moving on as the header says. Returns the status of the last run: 0, a status that is
  // not retryable, or any failure once confirmed.
  template <class Attempt>
  int run(Attempt&& attempt) {
    for (;;) {
      const int status = attempt(current());
      if (status == 0) {
        if (!confirmed_) confirm();
        return 0;
      }
      if (confirmed_ || !rules_.retryable(status)) return status;
      reject(status);  // throws when no candidate is left
    }
  }

  const AlgoCandidate& current() const { return ranked_[index_]; }
  size_t index() const { return index_; }  // of current() in the ranked list
  size_t size() const { return ranked_.size(); }
  bool confirmed() const { return confirmed_; }
  const std::string& what() const { return what_; }

 private:
  void confirm();
  [[noreturn]] void exhausted() const;
  void reject(int status);

  std::string what_;
  std::vector<AlgoCandidate> ranked_;
  AlgoStatusRules rules_;
  Log log_;
  size_t index_ = 0;
  bool confirmed_ = false;
  std::vector<std::string> failures_;  // "<name>: <status>" of each rejected candidate
};

}  // namespace gridnn::kernels
