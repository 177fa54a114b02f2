# gridnn_find_library(PKG TARGET <ns::name> HEADER <h> NAMES <lib>... ROOT_VAR <VAR>
#                     VERSION_HEADER <file> VERSION_MACROS <major> <minor> <patch>)
#
# The body of FindCUDNN.cmake and FindNCCL.cmake: looks in ${ROOT_VAR} (CMake or
# environment variable), then beside the CUDA toolkit, then in the system paths, for the
# header and the library. NAMES may list versioned file names (libcudnn.so.9), which is
# all a Python wheel ships. Sets PKG_FOUND, PKG_VERSION, PKG_INCLUDE_DIR, PKG_LIBRARY and
# the imported target.
include(FindPackageHandleStandardArgs)

macro(gridnn_find_library PKG)
  cmake_parse_arguments(_gfl "" "TARGET;HEADER;ROOT_VAR;VERSION_HEADER" "NAMES;VERSION_MACROS" ${ARGN})
  set(_gfl_hints ${${_gfl_ROOT_VAR}} $ENV{${_gfl_ROOT_VAR}})
  foreach(_gfl_dir IN ITEMS "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")
    if(_gfl_dir)
      list(APPEND _gfl_hints "${_gfl_dir}")
    endif()
  endforeach()

  find_path(${PKG}_INCLUDE_DIR ${_gfl_HEADER} HINTS ${_gfl_hints} PATH_SUFFIXES include)
  # NAMES_PER_DIR: a versioned name in a hinted folder wins over a plain name further on.
  find_library(${PKG}_LIBRARY NAMES ${_gfl_NAMES} NAMES_PER_DIR HINTS ${_gfl_hints}
               PATH_SUFFIXES lib lib64 lib/x64)

  set(_gfl_version_file "${${PKG}_INCLUDE_DIR}/${_gfl_VERSION_HEADER}")
  if(${PKG}_INCLUDE_DIR AND EXISTS "${_gfl_version_file}")
    set(_gfl_parts "")
    foreach(_gfl_macro IN LISTS _gfl_VERSION_MACROS)
      file(STRINGS "${_gfl_version_file}" _gfl_line REGEX "#define ${_gfl_macro} +[0-9]+")
      string(REGEX MATCH "[0-9]+" _gfl_number "${_gfl_line}")
      list(APPEND _gfl_parts "${_gfl_number}")
    endforeach()
    list(JOIN _gfl_parts "." ${PKG}_VERSION)
  endif()

  find_package_handle_standard_args(${PKG}
    REQUIRED_VARS ${PKG}_LIBRARY ${PKG}_INCLUDE_DIR
    VERSION_VAR ${PKG}_VERSION
    REASON_FAILURE_MESSAGE
      "set ${_gfl_ROOT_VAR} to the folder holding include/${_gfl_HEADER} and lib/ with the library")

  if(${PKG}_FOUND AND NOT TARGET ${_gfl_TARGET})
    add_library(${_gfl_TARGET} UNKNOWN IMPORTED)
    set_target_properties(${_gfl_TARGET} PROPERTIES
      IMPORTED_LOCATION "${${PKG}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${PKG}_INCLUDE_DIR}")
  endif()
  mark_as_advanced(${PKG}_INCLUDE_DIR ${PKG}_LIBRARY)
endmacro()
