# FindCUDNN: cuDNN headers and library (target CUDNN::cudnn; CUDNN_VERSION).
#
# Hint: CUDNN_ROOT (CMake or environment variable). Versioned names alone are accepted, as
# Python wheels ship them, so
#   -DCUDNN_ROOT=$(python3 -c 'import nvidia.cudnn; print(nvidia.cudnn.__path__[0])')
# works on a machine whose cuDNN comes from pip.
include(${CMAKE_CURRENT_LIST_DIR}/GridnnFindLibrary.cmake)
gridnn_find_library(CUDNN
  TARGET CUDNN::cudnn
  HEADER cudnn.h
  NAMES cudnn libcudnn.so.9
  ROOT_VAR CUDNN_ROOT
  VERSION_HEADER cudnn_version.h
  VERSION_MACROS CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)
