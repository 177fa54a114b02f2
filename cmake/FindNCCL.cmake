# FindNCCL: NCCL headers and library (target NCCL::nccl; NCCL_VERSION).
#
# Hint: NCCL_ROOT (CMake or environment variable). The versioned name libnccl.so.2 alone
# is accepted, as the Python wheel (nvidia/nccl/lib) ships it.
include(${CMAKE_CURRENT_LIST_DIR}/GridnnFindLibrary.cmake)
gridnn_find_library(NCCL
  TARGET NCCL::nccl
  HEADER nccl.h
  NAMES nccl libnccl.so.2
  ROOT_VAR NCCL_ROOT
  VERSION_HEADER nccl.h
  VERSION_MACROS NCCL_MAJOR NCCL_MINOR NCCL_PATCH)
