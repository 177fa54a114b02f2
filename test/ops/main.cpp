// test-ops: the op harness from the command line (docs/design.md §9), and how CTest runs it.
//
//   test-ops -m ref|grad|backend|perf [-f FAMILY] [-o REGEX] [-b cpu|cuda] [--seconds S]
//
// ref, grad and backend print one line per case (OK, or FAIL with what differs), then the
// names of the cases that failed, and exit 1 when any did; perf prints a table of time per
// run and memory traffic. -f keeps one family's cases (cases_<FAMILY>.cpp), -o those whose
// "op/params" name matches REGEX; -b picks the device of perf (default: cuda when there is
// one). The backend mode compares cuda:0 with the CPU: without a CUDA device it exits 77
// (CTest's "skipped"); GRIDNN_DEVICE_STANDIN=1 runs it on the device stand-in (core/device.h).
// --seconds is perf's minimum time per case.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

constexpr int kSkipped = 77;  // the backend mode without a device (SKIP_RETURN_CODE in CMake)

int usage(const char* why) {
  std::fprintf(stderr,
               "test-ops: %s\nusage: test-ops -m ref|grad|backend|perf [-f FAMILY] [-o REGEX] [-b cpu|cuda] "
               "[--seconds S]\n",
               why);
  return 2;
}

int run(int argc, char** argv) {
  std::string mode, family, filter = ".*", backend;
  double seconds = 0.2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("'" + a + "' needs a value").c_str());
    const std::string v = argv[++i];
    if (a == "-m")
      mode = v;
    else if (a == "-f")
      family = v;
    else if (a == "-o")
      filter = v;
    else if (a == "-b")
      backend = v;
    else if (a == "--seconds") {
      char* end = nullptr;
      seconds = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(seconds >= 0))
        return usage(("--seconds takes a number of seconds >= 0, not '" + v + "'").c_str());
    } else
      return usage(("unknown option '" + a + "'").c_str());
  }
  if (mode != "ref" && mode != "grad" && mode != "backend" && mode != "perf")
    return usage("choose a mode with -m: ref, grad, backend or perf");
  if (!family.empty()) {
    const std::vector<std::string> families = op_families();
    if (std::find(families.begin(), families.end(), family) == families.end()) {
      std::string known;
      for (const std::string& f : families) known += " " + f;
      return usage(("-f takes a family:" + known + "; not '" + family + "'").c_str());
    }
  }
  if (mode == "backend" && backend == "cpu")
    return usage("the backend mode compares cuda:0 with the CPU; without a GPU, set GRIDNN_DEVICE_STANDIN=1");
  if (backend.empty()) backend = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (backend != "cpu" && backend != "cuda") return usage("-b takes cpu or cuda");
  if (cuda_device_count() == 0 && (backend == "cuda" || mode == "backend")) {
    // Without a device the backend mode has nothing to compare; perf times the CPU.
    std::printf("test-ops: no CUDA device (%s): %s mode %s\n",
                built_with_cuda() ? "none reported by the runtime" : "built without CUDA", mode.c_str(),
                mode == "backend" ? "skipped" : "runs on the CPU");
    if (mode == "backend") return kSkipped;
    backend = "cpu";
  }
  std::regex keep;
  try {
    keep = std::regex(filter);
  } catch (const std::regex_error& e) {
    return usage(("-o '" + filter + "' is not a regular expression: " + e.what()).c_str());
  }
  const Device device = backend == "cuda" ? Device::cuda(0) : Device::cpu();
  int passed = 0, failed = 0, skipped = 0, matched = 0;
  std::vector<std::string> failures;
  if (mode == "perf")
    std::printf("%-28s %-44s %-5s %8s %12s %10s  %s\n", "op", "params", "dev", "runs", "us/run", "GB/s",
                "implementation");
  for (const OpCase& c : all_op_cases()) {
    if ((!family.empty() && c.family != family) || !std::regex_search(c.op + "/" + c.params, keep)) continue;
    ++matched;
    if (mode == "perf") {
      const Timing t = time_case(c, device, seconds, 1);
      const std::string impl = backend == "cpu" && c.implementation ? c.implementation() : "";
      std::printf("%-28s %-44s %-5s %8lld %12.2f %10.2f  %s\n", c.op.c_str(), c.params.c_str(), backend.c_str(),
                  static_cast<long long>(t.runs), t.seconds_per_run * 1e6, t.bytes_per_run / t.seconds_per_run / 1e9,
                  impl.c_str());
      continue;
    }
    if ((mode == "ref" && !c.has_reference()) || (mode == "grad" && !c.has_gradient())) {
      ++skipped;
      continue;
    }
    ::testing::AssertionResult r = ::testing::AssertionSuccess();
    try {
      r = mode == "ref" ? check_reference(c) : mode == "grad" ? check_gradients(c) : check_backend(c, device);
    } catch (const std::exception& e) {
      r = ::testing::AssertionFailure() << "threw: " << e.what();
    }
    std::printf("  %-60s %s%s%s\n", c.name().c_str(), r ? "OK" : "FAIL", r ? "" : ": ", r ? "" : r.message());
    std::fflush(stdout);  // a crash leaves the last case finished in the log
    (r ? passed : failed)++;
    if (!r) failures.push_back(c.name());
  }
  if (matched == 0) {
    std::fprintf(stderr,
                 "test-ops: no case matches%s%s -o '%s' (names are op/params, e.g. 'conv3d_forward/3x3x3_pad1')\n",
                 family.empty() ? "" : " -f ", family.c_str(), filter.c_str());
    return 1;
  }
  if (mode == "perf") return 0;
  for (const std::string& name : failures) std::printf("failed: %s\n", name.c_str());
  std::printf("%s mode: %d passed, %d failed, %d without this mode\n", mode.c_str(), passed, failed, skipped);
  if (passed + failed == 0) {
    std::fprintf(stderr, "test-ops: none of the %d cases selected has a %s mode\n", matched, mode.c_str());
    return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace gridnn::test

int main(int argc, char** argv) {
  try {
    return gridnn::test::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test-ops: %s\n", e.what());
    return 1;
  }
}
