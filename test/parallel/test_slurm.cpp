// The Slurm allocation as parallel/slurm.h reads it from an environment (label unit): Slurm's
// compressed task counts, the variables sbatch and srun set, values Slurm would not write, and
// the advice a job of the wrong size gets inside and outside an allocation.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "parallel/slurm.h"
#include "test/support/error_message.h"

namespace gridnn::parallel {
namespace {

using test::error_message;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// An environment of the given variables only.
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Slurm, TasksPerNodeExpandsRepeats) {
  EXPECT_EQ(parse_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(parse_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_tasks_per_node("1,3(x2)"), (std::vector<int>{1, 3, 3}));
  EXPECT_EQ(parse_tasks_per_node("16(x1)"), (std::vector<int>{16}));
}

TEST(Slurm, TasksPerNodeRefusesWhatSlurmDoesNotWrite) {
  for (const char* bad : {"", "x", "2(x", "2(3)", "2(x0)", "2,,1", "-1", "2(xa)", "1.5"}) {
    const std::string m = error_message([&] { parse_tasks_per_node(bad); });
    EXPECT_TRUE(contains(m, "SLURM_TASKS_PER_NODE")) << "\"" << bad << "\": " << m;
  }
}

TEST(Slurm, OutsideAnAllocationThereIsNone) {
  EXPECT_FALSE(slurm_allocation(env_of({})).has_value());
  EXPECT_FALSE(slurm_allocation(env_of({{"SLURM_NTASKS", "4"}})).has_value());  // no job id
}

TEST(Slurm, ReadsTheBatchAllocation) {
  // sbatch --nodes=2 --ntasks-per-node=2
  const auto a = slurm_allocation(env_of({{"SLURM_JOB_ID", "12"},
                                          {"SLURM_JOB_NUM_NODES", "2"},
                                          {"SLURM_NTASKS_PER_NODE", "2"},
                                          {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                          {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->job_id, "12");
  EXPECT_EQ(a->nodes, 2);
  EXPECT_EQ(a->tasks, 4);
  EXPECT_EQ(a->tasks_per_node, (std::vector<int>{2, 2}));
  EXPECT_EQ(a->even_tasks_per_node(), 2);
  EXPECT_EQ(a->step_tasks, 0);
  EXPECT_EQ(a->str(), "Slurm job 12: 4 tasks on 2 nodes (2 each)");
}

TEST(Slurm, UnevenNodesAndTasksCountedFromTheList) {
  // sbatch --ntasks=3 on two nodes: no SLURM_NTASKS_PER_NODE.
  const auto a =
      slurm_allocation(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_TASKS_PER_NODE", "2,1"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->tasks, 3);
  EXPECT_EQ(a->even_tasks_per_node(), 0);
  EXPECT_EQ(a->str(), "Slurm job 7: 3 tasks on 2 nodes (2,1)");
  const auto one = slurm_allocation(env_of({{"SLURM_JOB_ID", "8"}, {"SLURM_NTASKS", "1"}}));
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->str(), "Slurm job 8: 1 task on 1 node");
}

TEST(Slurm, RefusesValuesSlurmWouldNotWrite) {
  const std::string nodes = error_message([] {
    slurm_allocation(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NUM_NODES", "two"}}));
  });
  EXPECT_TRUE(contains(nodes, "SLURM_JOB_NUM_NODES=\"two\"")) << nodes;
  const std::string mismatch = error_message([] {
    slurm_allocation(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NUM_NODES", "3"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
  });
  EXPECT_TRUE(contains(mismatch, "names 2 nodes, SLURM_JOB_NUM_NODES=3")) << mismatch;
  const std::string zero = error_message([] {
    slurm_allocation(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_NTASKS", "0"}}));
  });
  EXPECT_TRUE(contains(zero, "SLURM_NTASKS=\"0\" must be at least 1")) << zero;
}

TEST(Slurm, AdviceOutsideSlurmIsMpiexec) {
  EXPECT_EQ(job_size_advice(4, 2, env_of({})), "start mpiexec -n 4 or change --grid");
}

TEST(Slurm, AdviceInAnAllocationOfOtherSizeNamesItAndSrun) {
  const auto env = env_of({{"SLURM_JOB_ID", "15"},
                           {"SLURM_JOB_NUM_NODES", "2"},
                           {"SLURM_TASKS_PER_NODE", "1(x2)"},
                           {"SLURM_NTASKS", "2"},
                           {"SLURM_STEP_NUM_TASKS", "2"}});
  const std::string a = job_size_advice(4, 2, env);
  EXPECT_TRUE(contains(a, "the allocation (Slurm job 15: 2 tasks on 2 nodes (1 each)) does not")) << a;
  EXPECT_TRUE(contains(a, "sbatch --ntasks=4")) << a;
  EXPECT_TRUE(contains(a, "srun")) << a;
  EXPECT_FALSE(contains(a, "mpiexec")) << a;
}

TEST(Slurm, AdviceWhenSrunStartedFewerTasksThanTheAllocationHas) {
  const auto env = env_of({{"SLURM_JOB_ID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_TASKS", "2"}});
  const std::string a = job_size_advice(4, 2, env);
  EXPECT_TRUE(contains(a, "has 4 tasks: start them all with srun (srun -n 4)")) << a;
}

TEST(Slurm, AdviceWhenMpiSeesEachTaskAlone) {
  // srun without the MPI's PMI: every task is a job of one process.
  const auto env = env_of({{"SLURM_JOB_ID", "3"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}});
  const std::string a = job_size_advice(2, 1, env);
  EXPECT_TRUE(contains(a, "srun started 2 tasks but MPI sees each as a job of 1 process")) << a;
  EXPECT_TRUE(contains(a, "--mpi=pmi2")) << a;
  // One task asked for, one running: not that case.
  const std::string b = job_size_advice(2, 1, env_of({{"SLURM_JOB_ID", "3"}, {"SLURM_NTASKS", "1"}}));
  EXPECT_TRUE(contains(b, "does not: submit with 2 tasks")) << b;
}

}  // namespace
}  // namespace gridnn::parallel
