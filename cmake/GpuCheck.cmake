# Initial cache of the GPU check's build (scripts/gpu_check.sh, docs/design.md §9):
#   cmake -C cmake/GpuCheck.cmake -S . -B build-gpu -G Ninja
# with the environment
#   GRIDNN_DEPS       the prefix the carried Debian packages were unpacked into (its usr/)
#   GRIDNN_NVCC       nvcc
#   GRIDNN_CUDA_ARCH  the CUDA architecture (90: H100/H200)
#   GRIDNN_GPU_CHECK_DRY_RUN  1 for the dry run (below)
#   CUDNN_ROOT, NCCL_ROOT  the pip wheels' folders (nvidia/cudnn, nvidia/nccl), when present
#                          (cmake/FindCUDNN.cmake and FindNCCL.cmake read them)
# Release, CUDA, MPI, benchmarks, cuDNN and NCCL required; every other dependency from the
# carried prefix alone: /usr's package folders are ignored by CMake's find commands, so a
# package missing from .gpu-deps fails here as it would on the GPU machine. What the
# compiler itself brings (libgomp, libpthread, librt) is asked of the compiler.
set(_deps "$ENV{GRIDNN_DEPS}")
if(NOT IS_DIRECTORY "${_deps}/usr")
  message(FATAL_ERROR "GpuCheck.cmake: GRIDNN_DEPS='${_deps}' holds no usr/ (the unpacked .gpu-deps)")
endif()
set(_usr "${_deps}/usr")
set(_lib "${_usr}/lib/x86_64-linux-gnu")

macro(_cache var type value)
  set(${var} "${value}" CACHE ${type} "gpu check")
endmacro()

_cache(CMAKE_BUILD_TYPE STRING Release)
# The dry run (GRIDNN_GPU_CHECK_DRY_RUN=1: gpu_check.sh --dry-run) runs no test (each skips
# without a GPU): its host code compiles at -O0, in 40% less time. The device code and the CPU
# loops' own options (GRIDNN_CPU_LOOP_OPTIONS) stay as in the real run.
if("$ENV{GRIDNN_GPU_CHECK_DRY_RUN}" STREQUAL "1")
  _cache(CMAKE_CXX_FLAGS_RELEASE STRING "-O0 -DNDEBUG")
endif()
_cache(CMAKE_CUDA_COMPILER FILEPATH "$ENV{GRIDNN_NVCC}")
_cache(CMAKE_CUDA_ARCHITECTURES STRING "$ENV{GRIDNN_CUDA_ARCH}")
foreach(_on GRIDNN_CUDA GRIDNN_MPI GRIDNN_BENCH GRIDNN_TESTS GRIDNN_REQUIRE_GPU_LIBS)
  _cache(${_on} BOOL ON)
endforeach()
# oneDNN is not carried: the GPU check runs no CPU convolution that matters.
foreach(_off GRIDNN_WERROR GRIDNN_ONEDNN GRIDNN_FUZZ GRIDNN_SANITIZE)
  _cache(${_off} BOOL OFF)
endforeach()

# /usr's package folders are not searched. A toolkit installed under /usr itself keeps /usr's
# general folders searchable (the package folders stay ignored).
set(_ignore_dirs /usr/include/nifti /usr/include/x86_64-linux-gnu/mpich
  /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/x86_64-linux-gnu/openblas-pthread
  /usr/include/openblas /usr/lib/x86_64-linux-gnu/openblas-openmp
  /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/local/include /usr/local/lib /usr/local/lib64)
set(_ignore_prefixes /usr/local)
get_filename_component(_nvcc_real "$ENV{GRIDNN_NVCC}" REALPATH)
get_filename_component(_cuda_home "${_nvcc_real}" DIRECTORY)
get_filename_component(_cuda_home "${_cuda_home}" DIRECTORY)
if(NOT _cuda_home STREQUAL "/usr")
  list(APPEND _ignore_dirs /usr/include /usr/include/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu
       /lib/x86_64-linux-gnu /usr/lib /lib /usr/lib64 /lib64)
  list(APPEND _ignore_prefixes /usr /)
endif()
_cache(CMAKE_IGNORE_PATH STRING "${_ignore_dirs}")
_cache(CMAKE_IGNORE_PREFIX_PATH STRING "${_ignore_prefixes}")
_cache(CMAKE_PREFIX_PATH STRING "${_usr}")

# The carried packages, each named where it is.
_cache(BLAS_LIBRARIES FILEPATH "${_lib}/openblas-openmp/libopenblas.so.0")
_cache(CBLAS_INCLUDE_DIR PATH "${_usr}/include/x86_64-linux-gnu/openblas-openmp")
_cache(nlohmann_json_DIR PATH "${_usr}/share/cmake/nlohmann_json")
_cache(CLI11_DIR PATH "${_usr}/share/cmake/CLI11")
_cache(GTest_DIR PATH "${_lib}/cmake/GTest")
_cache(benchmark_DIR PATH "${_lib}/cmake/benchmark")
_cache(NIFTI_ROOT PATH "${_usr}")
_cache(ZLIB_ROOT PATH "${_usr}")
# MPI without its compiler wrappers (an unpacked mpicxx names /usr's paths): the library,
# header folder and mpiexec given, the C++ bindings left out.
foreach(_on MPI_SKIP_COMPILER_WRAPPER MPI_SKIP_GUESSING MPI_ASSUME_NO_BUILTIN_MPI MPI_CXX_SKIP_MPICXX)
  _cache(${_on} BOOL ON)
endforeach()
_cache(MPI_CXX_LIB_NAMES STRING mpich)
_cache(MPI_mpich_LIBRARY FILEPATH "${_lib}/libmpich.so.12")
_cache(MPI_CXX_HEADER_DIR PATH "${_usr}/include/x86_64-linux-gnu/mpich")
_cache(MPIEXEC_EXECUTABLE FILEPATH "${_usr}/bin/mpiexec.hydra")

# The compiler's own libraries (CMake's search for them would look in the ignored folders).
set(_cxx "$ENV{CXX}")
if(NOT _cxx)
  set(_cxx c++)
endif()
foreach(_pair "libgomp.so;OpenMP_gomp_LIBRARY" "libpthread.so;OpenMP_pthread_LIBRARY"
              "libpthread.a;OpenMP_pthread_LIBRARY" "librt.so;CUDAToolkit_rt_LIBRARY"
              "librt.a;CUDAToolkit_rt_LIBRARY")
  list(GET _pair 0 _file)
  list(GET _pair 1 _var)
  if(NOT DEFINED CACHE{${_var}})
    execute_process(COMMAND ${_cxx} -print-file-name=${_file} OUTPUT_VARIABLE _path
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_path MATCHES "/" AND EXISTS "${_path}")
      _cache(${_var} FILEPATH "${_path}")
    endif()
  endif()
endforeach()
# CMake 4 refuses package configs that ask for policies older than 3.5.
if(CMAKE_VERSION VERSION_GREATER_EQUAL 4)
  _cache(CMAKE_POLICY_VERSION_MINIMUM STRING 3.5)
endif()
