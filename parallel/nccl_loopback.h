// NCCL between ranks that share one GPU, for tests (the test switch GRIDNN_TEST_NCCL_LOOPBACK,
// core/test_switches.h; docs/design.md §9). NCCL refuses two ranks on one GPU of one host
// ("duplicate GPU"); made to believe each rank is a host of its own, with no path between
// them but sockets, it runs them: a distinct NCCL_HOSTID per rank, NCCL_P2P_DISABLE=1 and
// NCCL_SHM_DISABLE=1 (no CUDA IPC or shared memory between the "hosts"), NCCL_NET=Socket and
// NCCL_SOCKET_IFNAME=lo (its TCP transport over loopback). Compiled in every build, so the
// environment is checked where there is no NCCL.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gridnn::parallel {

// The variables and values that make world rank `rank` a loopback host of its own.
std::vector<std::pair<std::string, std::string>> nccl_loopback_environment(int rank);

// Sets them in this process (over any value the user set: the switch asks for exactly this),
// before its first NCCL call, which reads them once. Not thread-safe (setenv).
void set_nccl_loopback_environment(int rank);

}  // namespace gridnn::parallel
