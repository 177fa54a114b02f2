// AlgoFallback (kernels/algo_fallback.h), the fallback of the cuDNN convolutions, with runs
// that fail on purpose: the statuses are cuDNN 9's codes (category + detail), the rule is the
// cuDNN backend's (NOT_SUPPORTED, BAD_PARAM and EXECUTION_FAILED move on; others do not).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/algo_fallback.h"

namespace gridnn::kernels {
namespace {

constexpr int kNotSupported = 3000, kNotSupportedShape = 3002, kBadParam = 2000, kExecutionFailed = 5000,
              kInternalError = 4000;

AlgoStatusRules cudnn_like_rules() {
  return {[](int s) {
            const int category = s / 1000 * 1000;
            return category == kNotSupported || category == kBadParam || category == kExecutionFailed;
          },
          [](int s) { return "STATUS_" + std::to_string(s); }};
}

std::vector<AlgoCandidate> three() {
  return {{1, 3, 0, "IMPLICIT_PRECOMP_GEMM"}, {0, 3, 4096, "IMPLICIT_GEMM"}, {2, 3, 1 << 20, "GEMM"}};
}

struct Recorder {
  std::vector<std::string> chosen, fallback;
  AlgoFallback::Log log() {
    return {[this](const std::string& l) { chosen.push_back(l); },
            [this](const std::string& l) { fallback.push_back(l); }};
  }
};

TEST(AlgoFallback, FirstCandidateFailsSecondIsUsedAndLogged) {
  Recorder rec;
  AlgoFallback f("cuDNN forward of test", three(), cudnn_like_rules(), rec.log());
  std::vector<int> tried;
  const int status = f.run([&](const AlgoCandidate& c) {
    tried.push_back(c.algo);
    return c.algo == 1 ? kNotSupportedShape : 0;
  });
  EXPECT_EQ(status, 0);
  EXPECT_EQ(tried, (std::vector<int>{1, 0}));
  EXPECT_TRUE(f.confirmed());
  EXPECT_EQ(f.index(), 1u);
  EXPECT_EQ(f.current().name, "IMPLICIT_GEMM");
  EXPECT_EQ(f.current().workspace, 4096u);
  ASSERT_EQ(rec.fallback.size(), 1u);
  EXPECT_EQ(rec.fallback[0],
            "cuDNN forward of test: IMPLICIT_PRECOMP_GEMM: STATUS_3002 at its first run; trying "
            "IMPLICIT_GEMM (candidate 2 of 3)");
  ASSERT_EQ(rec.chosen.size(), 1u);
  EXPECT_EQ(rec.chosen[0], "cuDNN forward of test: IMPLICIT_GEMM, candidate 2 of 3");

  // Kept: the next calls run candidate 2 only, and log nothing more.
  tried.clear();
  EXPECT_EQ(f.run([&](const AlgoCandidate& c) { return tried.push_back(c.algo), 0; }), 0);
  EXPECT_EQ(tried, (std::vector<int>{0}));
  EXPECT_EQ(rec.fallback.size(), 1u);
  EXPECT_EQ(rec.chosen.size(), 1u);
}

TEST(AlgoFallback, EachRetryableCategoryMovesOn) {
  for (int status : {kNotSupported, kBadParam, kExecutionFailed + 3}) {
    AlgoFallback f("bwd", three(), cudnn_like_rules());
    std::vector<int> tried;
    EXPECT_EQ(f.run([&](const AlgoCandidate& c) {
      tried.push_back(c.algo);
      return c.algo == 2 ? 0 : status;
    }),
              0)
        << status;
    EXPECT_EQ(tried, (std::vector<int>{1, 0, 2})) << status;
  }
}

TEST(AlgoFallback, OtherStatusesAreReturnedNotRetried) {
  AlgoFallback f("fwd", three(), cudnn_like_rules());
  int runs = 0;
  EXPECT_EQ(f.run([&](const AlgoCandidate&) { return ++runs, kInternalError; }), kInternalError);
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(f.confirmed());
  EXPECT_EQ(f.index(), 0u);
}

TEST(AlgoFallback, AConfirmedCandidateIsNeverReplaced) {
  AlgoFallback f("fwd", three(), cudnn_like_rules());
  ASSERT_EQ(f.run([](const AlgoCandidate&) { return 0; }), 0);
  int runs = 0;
  EXPECT_EQ(f.run([&](const AlgoCandidate&) { return ++runs, kNotSupported; }), kNotSupported);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(f.index(), 0u);
}

TEST(AlgoFallback, AllFailingNamesEveryCandidate) {
  Recorder rec;
  AlgoFallback f("cuDNN backward-filter of g", three(), cudnn_like_rules(), rec.log());
  try {
    f.run([](const AlgoCandidate& c) { return c.algo == 2 ? kExecutionFailed : kNotSupported; });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuDNN backward-filter of g: every candidate algorithm failed"), std::string::npos) << m;
    EXPECT_NE(m.find("IMPLICIT_PRECOMP_GEMM: STATUS_3000; IMPLICIT_GEMM: STATUS_3000; GEMM: STATUS_5000"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(rec.fallback.size(), 2u);
  EXPECT_TRUE(rec.chosen.empty());
}

TEST(AlgoFallback, NoCandidateIsAnError) { EXPECT_THROW(AlgoFallback("fwd", {}, cudnn_like_rules()), Error); }

}  // namespace
}  // namespace gridnn::kernels
