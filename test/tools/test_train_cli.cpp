// gridnn-train as a user runs it: help, errors that name the flag or file (exit code 1,
// message on stderr), a run stopped and resumed from the command line, and weights in
// from a file with the wrong shapes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/safetensors.h"
#include "test/support/temp_dir.h"

namespace gridnn {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  const std::string cmd = std::string(GRIDNN_TRAIN_EXE) + " " + args + " 2>&1";
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  Result r{-1, ""};
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), int(buf.size()), pipe)) r.output += buf.data();
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Cli : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  test::TempDir dir_{"cli"};
};

const char* const kTiny = "--width 2 --input 16x16x16 --batch 4 --train-samples 16 --val-samples 4 --no-progress";

TEST_F(Cli, HelpShowsExamplesAndFlags) {
  const Result r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* want : {"Examples:", "--dump-step", "--resume", "--precision", "--data",
                           "--optimizer TEXT:{sgd,adam,adamw}=sgd", "--on-signal TEXT:{save-exit,exit}=save-exit"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want;
}

TEST_F(Cli, BadInputsFailWithAMessage) {
  struct Case {
    std::string args, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--input 32x32 --steps 1", "--input: expected three sizes DxHxW"},
           {"--data " + path("missing.csv") + " --steps 1", "missing.csv"},
           {"--resume --steps 1", "--resume needs --checkpoint-dir"},
           {"--precision tf32 --steps 1", "--precision tf32 needs --device cuda"},
           {"--depth 50 --steps 1", "--depth"},
           {"--optimizer rmsprop --steps 1", "--optimizer: rmsprop not in {sgd,adam,adamw}"},
           {"--orientation RAS --steps 1", "--orientation: RAS not in {canonical,native}"},
           // Pipeline stages: a job of the wrong size, stages that disagree with the grid,
           // more micro-batches than samples, a placement without stages.
           {"--stages 2 --steps 1", "--grid 2x1x1 needs 2 processes"},
           {"--stages 2 --grid 3x1x1 --steps 1", "--stages 2 disagrees with --grid 3x1x1"},
           {"--micro-batches 9 --batch 8 --steps 1", "--micro-batches must be between 1 and --batch"},
           {"--placement " + path("p.json") + " --steps 1", "--placement needs pipeline stages"},
           // ResAttNet's layer4 is 1 voxel at 16^3: a micro-batch of one sample leaves its
           // batch norm one value per channel; the error says which micro-batch and what to do.
           {std::string(kTiny) + " --steps 1 --micro-batches 4", "(in micro-batch 0 of 4, 1 of the batch's 4 samples"},
           {std::string(kTiny) + " --steps 1 --micro-batches 4", "lower --micro-batches or raise --batch"},
       }) {
    const Result r = run(c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
}

// --memory-limit auto on the CPU: the host's available memory less a margin. A small job
// trains under it; one whose predicted peak is far beyond any host's memory (~850 GiB) is
// refused before anything runs.
TEST_F(Cli, MemoryLimitAutoIsTheAvailableMemory) {
  const Result small = run(std::string(kTiny) + " --steps 1 --memory-limit auto");
  EXPECT_EQ(small.code, 0) << small.output;
  const Result huge = run("--input 512x512x512 --batch 64 --steps 1 --no-progress --memory-limit auto");
  EXPECT_EQ(huge.code, 1) << huge.output;
  for (const char* want : {"--memory-limit ", "would need", "Nothing was run or written"})
    EXPECT_NE(huge.output.find(want), std::string::npos) << want << " in: " << huge.output;
}

TEST_F(Cli, GridAutoOnOneProcessIsOneByOne) {
  const Result r = run(std::string(kTiny) + " --steps 1 --grid auto");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--grid auto: 1x1 of 1x1"), std::string::npos) << r.output;
  const Result bad = run(std::string(kTiny) + " --steps 1 --grid 2x2");
  EXPECT_NE(bad.code, 0);
  // "..., the job has 1; start mpiexec -n 4" (MPI builds) or "..., but gridnn was built
  // without MPI" (GRIDNN_MPI=OFF).
  EXPECT_NE(bad.output.find("--grid 2x2 needs 4 processes"), std::string::npos) << bad.output;
}

TEST_F(Cli, ALaterFlagOverridesAnEarlierOne) {
  // scripts/run.sh passes its recipe first and the user's arguments after it.
  const Result r = run(std::string(kTiny) + " --steps 5 --model mlp --steps 1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("1 steps of batch 4"), std::string::npos) << r.output;
}

TEST_F(Cli, MicroBatchesOnOneProcessTrain) {
  // One stage, two micro-batches: the GPipe path on one process (README's pipeline section).
  const Result r = run(std::string(kTiny) + " --steps 2 --micro-batches 2 --model mlp");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline, 2 micro-batches: stage 0: fc1 .. fc3 (3 blocks)"), std::string::npos) << r.output;
}

TEST_F(Cli, StopAndResumeFromTheCommandLine) {
  const std::string ckpt = path("ckpt");
  Result r = run(std::string(kTiny) + " --steps 3 --checkpoint-dir " + ckpt);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "step-00000003.safetensors"));
  r = run(std::string(kTiny) + " --steps 5 --resume --checkpoint-dir " + ckpt + " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step-00000003.safetensors at step 3"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "step-00000005.safetensors"));
  std::ifstream in(path("m.jsonl"));
  int steps = 0;
  for (std::string line; std::getline(in, line);) steps += line.find("\"event\":\"train\"") != std::string::npos;
  EXPECT_EQ(steps, 2);  // steps 4 and 5
}

TEST_F(Cli, InitFromWeightsOfAnotherModelListsTheMismatch) {
  const std::string ckpt = path("ckpt");
  ASSERT_EQ(run(std::string(kTiny) + " --steps 1 --checkpoint-dir " + ckpt).code, 0);
  const std::string weights = (fs::path(ckpt) / "step-00000001.safetensors").string();
  // A checkpoint's weights start a run of the same model (its optimizer state is left out)...
  Result r = run(std::string(kTiny) + " --steps 1 --momentum 0.9 --init-from " + weights);
  EXPECT_EQ(r.code, 0) << r.output;
  // ... but not a width-4 model: 76 parameters and 40 running statistics change shape (the
  // attention gammas, fc.bias and the batch counters keep theirs).
  r = run("--width 4 --input 16x16x16 --steps 1 --no-progress --init-from " + weights);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("does not match the model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mis-shaped (113)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("unexpected ("), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gridnn
