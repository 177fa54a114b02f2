#include "parallel/slurm.h"

#include <cstdlib>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace gridnn::parallel {

namespace {

// A count of at least `least` written in decimal; gridnn::Error naming the variable otherwise.
int parse_count(const std::string& text, const char* variable, int least) {
  GRIDNN_REQUIRE(!text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos,
                 variable, "=\"", text, "\" is not a count; Slurm writes a decimal integer there");
  const int n = std::stoi(text);
  GRIDNN_REQUIRE(n >= least, variable, "=\"", text, "\" must be at least ", least);
  return n;
}

// The variable's value when it is set and not empty.
std::optional<std::string> get(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

}  // namespace

EnvLookup process_env() {
  return [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
}

std::vector<int> parse_tasks_per_node(const std::string& text) {
  std::vector<int> tasks;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    int repeat = 1;
    const size_t open = item.find("(x");
    if (open != std::string::npos) {
      GRIDNN_REQUIRE(item.back() == ')', "SLURM_TASKS_PER_NODE=\"", text, "\": expected N or N(xK), got \"", item,
                     "\"");
      repeat = parse_count(item.substr(open + 2, item.size() - open - 3), "SLURM_TASKS_PER_NODE", 1);
      item = item.substr(0, open);
    }
    tasks.insert(tasks.end(), size_t(repeat), parse_count(item, "SLURM_TASKS_PER_NODE", 0));
  }
  GRIDNN_REQUIRE(!tasks.empty(), "SLURM_TASKS_PER_NODE=\"", text, "\" names no node");
  return tasks;
}

int SlurmAllocation::even_tasks_per_node() const {
  for (int t : tasks_per_node)
    if (t != tasks_per_node.front()) return 0;
  return tasks_per_node.empty() ? 0 : tasks_per_node.front();
}

std::string SlurmAllocation::str() const {
  std::ostringstream os;
  os << "Slurm job " << job_id << ": " << tasks << (tasks == 1 ? " task" : " tasks") << " on " << nodes
     << (nodes == 1 ? " node" : " nodes");
  if (nodes > 1) {
    if (even_tasks_per_node() > 0) {
      os << " (" << even_tasks_per_node() << " each)";
    } else {
      os << " (";
      for (size_t i = 0; i < tasks_per_node.size(); ++i) os << (i ? "," : "") << tasks_per_node[i];
      os << ")";
    }
  }
  return os.str();
}

std::optional<SlurmAllocation> slurm_allocation(const EnvLookup& env) {
  const std::optional<std::string> job = get(env, "SLURM_JOB_ID");
  if (!job) return std::nullopt;
  SlurmAllocation a;
  a.job_id = *job;
  const std::optional<std::string> nodes = get(env, "SLURM_JOB_NUM_NODES");
  a.nodes = nodes ? parse_count(*nodes, "SLURM_JOB_NUM_NODES", 1) : 1;
  if (const auto per_node = get(env, "SLURM_NTASKS_PER_NODE"))
    a.tasks_per_node.assign(size_t(a.nodes), parse_count(*per_node, "SLURM_NTASKS_PER_NODE", 1));
  else if (const auto listed = get(env, "SLURM_TASKS_PER_NODE"))
    a.tasks_per_node = parse_tasks_per_node(*listed);
  GRIDNN_REQUIRE(a.tasks_per_node.empty() || int(a.tasks_per_node.size()) == a.nodes, "SLURM_TASKS_PER_NODE names ",
                 a.tasks_per_node.size(), " nodes, SLURM_JOB_NUM_NODES=", a.nodes);
  if (const auto tasks = get(env, "SLURM_NTASKS"))
    a.tasks = parse_count(*tasks, "SLURM_NTASKS", 1);
  else
    a.tasks = std::accumulate(a.tasks_per_node.begin(), a.tasks_per_node.end(), 0);
  if (a.tasks_per_node.empty())
    a.tasks_per_node.assign(size_t(a.nodes), a.tasks % a.nodes == 0 ? a.tasks / a.nodes : 0);
  if (const auto step = get(env, "SLURM_STEP_NUM_TASKS")) a.step_tasks = parse_count(*step, "SLURM_STEP_NUM_TASKS", 1);
  return a;
}

std::string job_size_advice(int needed, int running, const EnvLookup& env) {
  std::ostringstream os;
  const std::optional<SlurmAllocation> slurm = slurm_allocation(env);
  if (!slurm) {
    os << "start mpiexec -n " << needed << " or change --grid";
    return os.str();
  }
  if (running == 1 && slurm->step_tasks > 1) {
    os << "srun started " << slurm->step_tasks
       << " tasks but MPI sees each as a job of 1 process: srun needs the process manager interface "
          "your MPI speaks (--mpi=pmi2 for MPICH, --mpi=pmix for an MPI built with PMIx; srun --mpi=list), "
          "or change --grid";
    return os.str();
  }
  os << "the allocation (" << slurm->str() << ") ";
  if (slurm->tasks == needed) {
    os << "has " << needed << " tasks: start them all with srun (srun -n " << needed << "), or change --grid";
  } else {
    os << "does not: submit with " << needed << " tasks (sbatch --ntasks=" << needed
       << ", or --nodes and --ntasks-per-node that multiply to " << needed
       << ") and start them with srun, or change --grid";
  }
  return os.str();
}

}  // namespace gridnn::parallel
