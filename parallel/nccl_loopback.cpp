// The loopback environment of NCCL for ranks sharing a GPU (nccl_loopback.h).
#include "parallel/nccl_loopback.h"

#include <cstdlib>

namespace gridnn::parallel {

std::vector<std::pair<std::string, std::string>> nccl_loopback_environment(int rank) {
  return {{"NCCL_HOSTID", "gridnn-loopback-rank-" + std::to_string(rank)},
          {"NCCL_P2P_DISABLE", "1"},
          {"NCCL_SHM_DISABLE", "1"},
          {"NCCL_NET", "Socket"},
          {"NCCL_SOCKET_IFNAME", "lo"}};
}

void set_nccl_loopback_environment(int rank) {
  for (const auto& [name, value] : nccl_loopback_environment(rank)) setenv(name.c_str(), value.c_str(), 1);
}

}  // namespace gridnn::parallel
