# The cost model's calibration (issue 6): α, β per communicator kind and per-layer compute
# times, measured on the machine at hand and saved as JSON (parallel/calibration.h).
# parallel/calibration.cpp times collectives on any Communicator; models/calibrate/ times
# the single-process layers. gridnn-calibrate runs both (under mpiexec in MPI builds; on one
# process, compute only, without MPI).
target_sources(gridnn PRIVATE
  ${PROJECT_SOURCE_DIR}/parallel/calibration.cpp
  ${PROJECT_SOURCE_DIR}/models/calibrate/layer_timing.cpp)

add_executable(gridnn-calibrate gridnn_calibrate.cpp)
target_link_libraries(gridnn-calibrate PRIVATE gridnn CLI11::CLI11 gridnn_warnings)
