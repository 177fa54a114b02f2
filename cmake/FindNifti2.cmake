# FindNifti2: the NIfTI C library (Debian: libnifti2-dev) as the imported target
# Nifti2::nifti2 (nifti2_io, znzlib, zlib). Hint: NIFTI_ROOT.
#
# Not find_package(NIFTI): the CMake package Debian 12 ships with libnifti2-dev names
# /usr/lib/libznz.so.3.0.0, which does not exist (the library is under the multiarch folder),
# so configuring with it fails.
include(FindPackageHandleStandardArgs)
find_package(ZLIB REQUIRED)
set(_nifti_hints ${NIFTI_ROOT} $ENV{NIFTI_ROOT})
find_path(Nifti2_INCLUDE_DIR nifti2_io.h HINTS ${_nifti_hints} PATH_SUFFIXES include/nifti nifti)
find_library(Nifti2_LIBRARY NAMES nifti2 HINTS ${_nifti_hints} PATH_SUFFIXES lib lib64 lib/${CMAKE_LIBRARY_ARCHITECTURE})
find_library(Nifti2_ZNZ_LIBRARY NAMES znz HINTS ${_nifti_hints}
             PATH_SUFFIXES lib lib64 lib/${CMAKE_LIBRARY_ARCHITECTURE})
find_package_handle_standard_args(Nifti2
  REQUIRED_VARS Nifti2_LIBRARY Nifti2_ZNZ_LIBRARY Nifti2_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install libnifti2-dev (scripts/setup.sh does) or set NIFTI_ROOT")
if(Nifti2_FOUND AND NOT TARGET Nifti2::nifti2)
  add_library(Nifti2::znz UNKNOWN IMPORTED)
  set_target_properties(Nifti2::znz PROPERTIES IMPORTED_LOCATION "${Nifti2_ZNZ_LIBRARY}"
    INTERFACE_LINK_LIBRARIES ZLIB::ZLIB)
  add_library(Nifti2::nifti2 UNKNOWN IMPORTED)
  set_target_properties(Nifti2::nifti2 PROPERTIES IMPORTED_LOCATION "${Nifti2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Nifti2_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "Nifti2::znz;m")
endif()
mark_as_advanced(Nifti2_INCLUDE_DIR Nifti2_LIBRARY Nifti2_ZNZ_LIBRARY)
