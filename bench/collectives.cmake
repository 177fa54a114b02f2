# Collectives sweeps on the process grid under mpiexec (issue 6): all-reduce, all-gather,
# reduce-scatter, halo and ping-pong with the α–β fit's prediction; it reuses
# parallel/calibration's timing (models/calibrate.cmake adds it to the library).
if(GRIDNN_MPI)
  add_executable(bench_collectives bench_collectives.cpp)
  target_link_libraries(bench_collectives PRIVATE gridnn benchmark::benchmark gridnn_warnings)
endif()
