# MPI tests run under mpiexec (label mpi). Each runs at 1 and 2 ranks here; the grid
# tests of the parallelism issue add 4. A timeout turns any hang into a failure.
find_package(MPI REQUIRED COMPONENTS CXX)

add_executable(test_mpi_session mpi/test_mpi_session.cpp)
target_link_libraries(test_mpi_session PRIVATE gridnn_test_support GTest::gtest gridnn_warnings)
foreach(np 1 2)
  add_test(NAME mpi_session_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:test_mpi_session> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_session_np${np} PROPERTIES LABELS mpi TIMEOUT 60 PROCESSORS ${np})
endforeach()

# One rank fails while the other waits in a barrier: the job must end, within seconds,
# with a message naming the failing rank (never a hang), however the exception travels.
add_executable(mpi_fail_probe mpi/mpi_fail_probe.cpp)
target_link_libraries(mpi_fail_probe PRIVATE gridnn gridnn_warnings)
# gridnn_add_fail_test(NAME MODE EXPECTED): two ranks of mpi_fail_probe MODE must print
# EXPECTED (the job-ending message) and end well inside the timeout.
function(gridnn_add_fail_test NAME MODE EXPECTED)
  add_test(NAME ${NAME}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_fail_probe> ${MPIEXEC_POSTFLAGS} ${MODE})
  set_tests_properties(${NAME} PROPERTIES
    LABELS mpi TIMEOUT 30 PROCESSORS 2 PASS_REGULAR_EXPRESSION "${EXPECTED}")
endfunction()
gridnn_add_fail_test(mpi_one_failing_rank_ends_the_job ""
                     "gridnn: rank 1 failed: injected failure")
gridnn_add_fail_test(mpi_exception_escaping_main_ends_the_job --escape
                     "gridnn: rank 1 failed: an exception is unwinding")
gridnn_add_fail_test(mpi_uncaught_exception_ends_the_job --uncaught
                     "gridnn: rank 1 failed: uncaught exception: injected failure")
# A rank killed outright (SIGKILL: no exception, no message of its own): mpiexec (MPICH's
# Hydra) ends the job at once and names the process (its PID, not its rank) and the signal.
gridnn_add_fail_test(mpi_killed_rank_ends_the_job --killed "BAD TERMINATION.*EXIT CODE: 9.*signal 9")

# gridnn_add_mpi_test(NAME SOURCES a.cpp ... NP 1 2 4 [TIMEOUT s]): one GoogleTest binary
# (main: test/support/mpi_main.cpp) run under mpiexec once per rank count, as the CTest
# tests NAME_np1, NAME_np2, ... (label mpi). Ranks beyond the cores are fine: gridnn's MPI
# waits politely (DESIGN §11), and a timeout turns any hang into a failure.
function(gridnn_add_mpi_test NAME)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;NP" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${NAME} ${T_SOURCES} ${CMAKE_CURRENT_SOURCE_DIR}/support/mpi_main.cpp)
  target_link_libraries(${NAME} PRIVATE gridnn_test_support GTest::gtest gridnn_warnings)
  target_compile_definitions(${NAME} PRIVATE
    GRIDNN_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/parity/fixtures")
  foreach(np IN LISTS T_NP)
    add_test(NAME ${NAME}_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${NAME}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${NAME}_np${np} PROPERTIES LABELS mpi TIMEOUT ${T_TIMEOUT} PROCESSORS ${np})
  endforeach()
endfunction()

# The process grid, communicators and distributed layers (each area its own file).
include(dist/comm.cmake OPTIONAL)
include(dist/domain.cmake OPTIONAL)
include(dist/layers.cmake OPTIONAL)
include(dist/train.cmake OPTIONAL)
include(dist/pipeline.cmake OPTIONAL)
include(dist/calibration_mpi.cmake OPTIONAL)
