// The GPU check's MPI plumbing probe (scripts/gpu_check.py probe): two ranks, an allreduce,
// and each rank reports the process that started it and the libmpich it loaded, so the
// check can see that the carried mpiexec, hydra_pmi_proxy and libmpich did the work.
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, one = 1, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char link[64], parent[PATH_MAX] = {0};
  std::snprintf(link, sizeof link, "/proc/%d/exe", static_cast<int>(getppid()));
  if (readlink(link, parent, sizeof parent - 1) < 0) parent[0] = '\0';
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&MPI_Init), &info);
  std::printf("rank %d of %d: sum %d, proxy %s, libmpich %s\n", rank, size, sum, parent,
              info.dli_fname ? info.dli_fname : "?");
  MPI_Finalize();
  return 0;
}
