# bench_grid: training-step speedup per grid shape under mpiexec (issue 6), and its CTest
# smoke test. This file is also the smoke test's script (cmake -P, see below): it runs
# bench_grid in a tiny configuration with --benchmark_out and checks the JSON: every grid
# reported (no error), measured words equal to the predicted ones, speedups present. No speed
# is asserted.
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.19)  # string(JSON), IN_LIST
  set(ENV{OMP_NUM_THREADS} 1)
  file(REMOVE "${JSON}")
  execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${PREFLAGS} ${BENCH} ${POSTFLAGS} ${ARGS}
                          --benchmark_out=${JSON} --benchmark_out_format=json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench_grid smoke: mpiexec -n ${NP} bench_grid exited with ${rc}")
  endif()
  file(READ "${JSON}" json)
  string(JSON runs LENGTH "${json}" benchmarks)
  set(seen "")
  math(EXPR last "${runs} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${json}" benchmarks ${i} name)
    string(JSON error ERROR_VARIABLE no_error GET "${json}" benchmarks ${i} error_message)
    if(no_error STREQUAL "NOTFOUND")
      message(FATAL_ERROR "bench_grid smoke: ${name} failed: ${error}")
    endif()
    string(JSON meas GET "${json}" benchmarks ${i} words_meas)
    string(JSON pred GET "${json}" benchmarks ${i} words_pred)
    string(JSON exact GET "${json}" benchmarks ${i} words_exact)
    string(JSON speedup GET "${json}" benchmarks ${i} speedup_vs_1proc)
    if(NOT meas EQUAL pred)
      message(FATAL_ERROR "bench_grid smoke: ${name}: measured words ${meas} != predicted ${pred}")
    endif()
    if(NOT exact EQUAL 1)
      message(FATAL_ERROR "bench_grid smoke: ${name}: the halo words received did not add up (words_exact 0)")
    endif()
    if(speedup LESS_EQUAL 0)
      message(FATAL_ERROR "bench_grid smoke: ${name}: no speedup_vs_1proc in the JSON")
    endif()
    string(REGEX MATCH "/([0-9]+x[0-9]+)/" shape "${name}")
    list(APPEND seen ${CMAKE_MATCH_1})
  endforeach()
  foreach(shape IN LISTS EXPECT)
    if(NOT shape IN_LIST seen)
      message(FATAL_ERROR "bench_grid smoke: no run for grid ${shape} (runs: ${seen})")
    endif()
  endforeach()
  message(STATUS "bench_grid smoke: runs ${seen} reported, measured words = predicted")
  return()
endif()

if(GRIDNN_MPI)
  add_executable(bench_grid bench_grid.cpp)
  target_link_libraries(bench_grid PRIVATE gridnn benchmark::benchmark gridnn_warnings)
  if(GRIDNN_TESTS)
    # Smoke test: a tiny ResAttNet3D on 2 ranks, grids 1x1 (one process), 1x2 and 2x1.
    find_package(MPI REQUIRED COMPONENTS CXX)
    add_test(NAME bench_grid_smoke_np2
             COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DNP_FLAG=${MPIEXEC_NUMPROC_FLAG} -DNP=2
                     "-DPREFLAGS=${MPIEXEC_PREFLAGS}" "-DPOSTFLAGS=${MPIEXEC_POSTFLAGS}"
                     -DBENCH=$<TARGET_FILE:bench_grid>
                     "-DARGS=--width;2;--input;16;--batch;4;--steps;2"
                     -DJSON=${CMAKE_CURRENT_BINARY_DIR}/bench_grid_smoke.json "-DEXPECT=1x1;1x2;2x1"
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/grid.cmake)
    set_tests_properties(bench_grid_smoke_np2 PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS 2)
  endif()
endif()
