# Calibration under mpiexec (label mpi): the timing and fit on a real communicator, then
# gridnn-calibrate on 2 ranks with a tiny config and gridnn-plan --calibration on its file.
gridnn_add_mpi_test(test_dist_calibration SOURCES dist/test_calibration_mpi.cpp NP 2 TIMEOUT 120)

set(_calib_json ${CMAKE_CURRENT_BINARY_DIR}/calibration_np2.json)
add_test(NAME gridnn_calibrate_then_plan_np2
         COMMAND bash -c "set -e; rm -f '${_calib_json}'; \
'${MPIEXEC_EXECUTABLE}' ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:gridnn-calibrate> --grid 2x1 \
--width 8 --input 16x16x16 --batches 1,2 --sizes 1,1024,65536 --reps 3 --layer-reps 1 \
--machine ctest --out '${_calib_json}'; \
$<TARGET_FILE:gridnn-plan> --calibration '${_calib_json}' --calibration-kind row --width 8 \
--input 16x16x16 --procs 4 --batch 8")
set_tests_properties(gridnn_calibrate_then_plan_np2 PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS 2
  PASS_REGULAR_EXPRESSION "calibration: .*calibration_np2.json \\(ctest, .*grid 2x1\\): alpha from the file, beta from the file of kind \"row\"; measured compute for 45 of 45 layers.*best: ")
