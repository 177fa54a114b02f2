// The Slurm allocation a process runs in, read from the environment Slurm gives a job
// (docs/cluster.md): what `--grid auto`, `gridnn-plan --slurm` and the errors about the job's
// size need to speak of the allocation and srun rather than of mpiexec.
//
//   SLURM_JOB_ID            the job
//   SLURM_JOB_NUM_NODES     its nodes
//   SLURM_TASKS_PER_NODE    tasks on each node in Slurm's compressed form ("2(x3),1": 2 on
//                           each of three nodes, then 1); SLURM_NTASKS_PER_NODE where sbatch
//                           was given --ntasks-per-node
//   SLURM_NTASKS            the tasks of the allocation (of the step, inside srun)
//   SLURM_STEP_NUM_TASKS    inside a step (srun): the tasks srun started
//
// The variables are read through a lookup function, so tests pass their own environment.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gridnn::parallel {

// Looks an environment variable up: its value, or null when it is not set.
using EnvLookup = std::function<const char*(const char*)>;
// The process's own environment (std::getenv).
EnvLookup process_env();

struct SlurmAllocation {
  std::string job_id;
  int nodes = 0;
  std::vector<int> tasks_per_node;  // one entry per node, in node order
  int tasks = 0;                    // the allocation's (or the step's) tasks
  int step_tasks = 0;               // inside srun: the tasks it started; 0 outside a step

  // The tasks of every node when all nodes have as many; 0 otherwise.
  int even_tasks_per_node() const;
  // "Slurm job 12: 4 tasks on 2 nodes (2 each)" / "(2,1)".
  std::string str() const;
};

// The allocation, or nullopt outside Slurm (no SLURM_JOB_ID). gridnn::Error when a variable
// Slurm sets has a value Slurm would not write (the message names it).
std::optional<SlurmAllocation> slurm_allocation(const EnvLookup& env = process_env());

// "2(x3),1" -> {2, 2, 2, 1}; gridnn::Error naming `text` when it is not of that form.
std::vector<int> parse_tasks_per_node(const std::string& text);

// What to do when a grid of `needed` processes meets a job of `running`: under Slurm, the
// allocation to ask for and the srun line (or, when srun started several tasks that MPI sees
// as jobs of one process each, the PMI srun must use); otherwise mpiexec -n. Ends with "or
// change --grid".
std::string job_size_advice(int needed, int running, const EnvLookup& env = process_env());

}  // namespace gridnn::parallel
